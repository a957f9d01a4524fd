//! Speech to text: which model to recommend, and the spoke (whisper.cpp via whisper-rs)
//! against faster-whisper on the same weights, in one run. Two models: tiny.en
//! (English only) and the multilingual Whisper base, each as ggml f16 and q8_0 (made by
//! `model import-ct2` from the CTranslate2 models `tests/setup.sh` fetches), and the
//! same CTranslate2 models in faster-whisper (int8 and float32). Greedy decoding on both
//! sides, the same threads, the same WAVs:
//!
//! - `en`: the tests' English set (`target/stt-test/wav`, four espeak-ng voices);
//! - `en-unseen`: the same sentences in four English voices no test uses, made here;
//! - `de`, `fr`, `es`: `tests/setup.sh`'s commands in two voices per language.
//!
//! Each system runs in a process of its own (this binary again, or Python), so each
//! reports its own peak RSS. The multilingual model runs twice on the spoke: with the
//! language given, and with `auto` among en/de/fr/es (detection's cost and accuracy).
//!
//! `cargo bench --bench stt` (after `tests/setup.sh`). faster-whisper is installed from
//! PyPI into `target/stt-test/fw-venv` on first use. `STT_BENCH_THREADS` (default 2) and
//! `STT_BENCH_REPS` (default 3) change the thread count and passes over the sets.
//! Under `cargo test` this target only checks that it was built.

#[path = "../tests/support/stt.rs"]
mod stt_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};
use strawberry_spoke::stt::{Settings, Transcriber, audio};
use stt_support::{
    Clip, base_model, cache_dir, clips, clips_in, ct2_dir, ggml_model, lang_clips, word_error_rate,
};

/// English voices no test uses, for the accuracy docs/voice-loop.md gives for unseen voices.
const UNSEEN_VOICES: [&str; 4] = ["en-029", "en-gb-scotland+m2", "en-us+f4", "en-gb-x-gbcwmd"];

/// The household's languages for the `auto` rows.
const HOUSEHOLD: [&str; 4] = ["en", "de", "fr", "es"];

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// One system run over one set: seconds per pass, the texts, languages heard, peak RSS.
struct Run {
    passes: Vec<f64>,
    texts: Vec<String>,
    languages: Vec<String>,
    rss_mb: f64,
}

impl Run {
    fn from_json(json: &Value) -> Run {
        let strings = |key: &str| -> Vec<String> {
            json[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|t| t.as_str().unwrap_or_default().to_string())
                        .collect()
                })
                .unwrap_or_default()
        };
        Run {
            passes: json["passes"]
                .as_array()
                .expect("passes")
                .iter()
                .filter_map(Value::as_f64)
                .collect(),
            texts: strings("texts"),
            languages: strings("languages"),
            rss_mb: json["rss_kb"].as_f64().unwrap_or(0.0) / 1024.0,
        }
    }

    fn median(&self) -> f64 {
        let mut p = self.passes.clone();
        p.sort_by(f64::total_cmp);
        p[p.len() / 2]
    }
}

fn main() {
    if let Ok(job) = std::env::var("STT_BENCH_CHILD") {
        child(&job);
        return;
    }
    if !std::env::args().any(|a| a == "--bench") {
        println!("stt benchmark: run it with `cargo bench --bench stt`");
        return;
    }
    let threads = env_number("STT_BENCH_THREADS", 2);
    let reps = env_number("STT_BENCH_REPS", 3);
    let mut sets: Vec<(&str, Vec<Clip>)> = vec![
        ("en", clips()),
        ("en-unseen", unseen_english()),
        ("de", lang_clips("de")),
        ("fr", lang_clips("fr")),
        ("es", lang_clips("es")),
    ];
    sets.iter_mut()
        .for_each(|(_, c)| c.sort_by(|a, b| a.wav.cmp(&b.wav)));
    let english = |name: &str| name.starts_with("en");
    let python = faster_whisper_python();
    let base_ct2 = cache_dir().join("base-ct2");

    // (system, set) -> run
    let mut runs: BTreeMap<(String, String), Run> = BTreeMap::new();
    let mut systems: Vec<String> = Vec::new();
    let mut add = |system: String, set: &str, run: Run| {
        if !systems.contains(&system) {
            systems.push(system.clone());
        }
        runs.insert((system, set.to_string()), run);
    };
    for (set, clips) in &sets {
        let language = if english(set) { "en" } else { set };
        for quantize in ["q8_0", "f16"] {
            if english(set) {
                let model = ggml_model(quantize);
                let run = spoke(&model, "en", &[], threads, reps, clips);
                add(format!("spoke tiny.en {quantize}"), set, run);
            }
            let model = base_model(quantize);
            let run = spoke(&model, language, &[], threads, reps, clips);
            add(format!("spoke base {quantize}"), set, run);
        }
        let run = spoke(
            &base_model("q8_0"),
            "auto",
            &HOUSEHOLD,
            threads,
            reps,
            clips,
        );
        add("spoke base q8_0, auto (en/de/fr/es)".into(), set, run);
        for compute_type in ["int8", "float32"] {
            if english(set) {
                let run = faster_whisper(
                    &python,
                    &ct2_dir(),
                    "en",
                    compute_type,
                    threads,
                    reps,
                    clips,
                );
                add(format!("faster-whisper tiny.en {compute_type}"), set, run);
            }
            let run = faster_whisper(
                &python,
                &base_ct2,
                language,
                compute_type,
                threads,
                reps,
                clips,
            );
            add(format!("faster-whisper base {compute_type}"), set, run);
        }
    }

    println!(
        "\n{threads} threads, median of {reps} passes; WER per set (clips: {})\n",
        sets.iter()
            .map(|(name, c)| format!("{name} {}", c.len()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let names: Vec<&str> = sets.iter().map(|(n, _)| *n).collect();
    println!(
        "| system | ms per clip (en) | {} | peak RSS |",
        names
            .iter()
            .map(|n| format!("WER {n}"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|{}", " --- |".repeat(names.len() + 3));
    for system in &systems {
        let mut cells = Vec::new();
        let mut rss: f64 = 0.0;
        for (set, clips) in &sets {
            match runs.get(&(system.clone(), set.to_string())) {
                Some(run) => {
                    let wer = word_error_rate(
                        clips
                            .iter()
                            .map(|c| c.text.as_str())
                            .zip(run.texts.iter().map(String::as_str)),
                    );
                    cells.push(format!("{:.1}%", wer * 100.0));
                    rss = rss.max(run.rss_mb);
                }
                None => cells.push("-".into()),
            }
        }
        let en = &runs[&(system.clone(), "en".to_string())];
        println!(
            "| {system} | {:.0} | {} | {rss:.0} MB |",
            en.median() * 1000.0 / sets[0].1.len() as f64,
            cells.join(" | ")
        );
    }
    println!();
    for (set, clips) in &sets {
        let auto = &runs[&(
            "spoke base q8_0, auto (en/de/fr/es)".to_string(),
            set.to_string(),
        )];
        let expected = if english(set) { "en" } else { set };
        let right = auto.languages.iter().filter(|l| *l == expected).count();
        let fixed = &runs[&("spoke base q8_0".to_string(), set.to_string())];
        println!(
            "{set}: language detected right for {right} of {}; auto takes {:.2}x the time of the language given",
            clips.len(),
            auto.median() / fixed.median()
        );
    }
    println!();
    for (spoke, fw) in [
        ("spoke tiny.en q8_0", "faster-whisper tiny.en int8"),
        ("spoke base q8_0", "faster-whisper base int8"),
    ] {
        let time = |s: &str| runs[&(s.to_string(), "en".to_string())].median();
        println!(
            "{spoke} takes {:.2}x the time of {fw} (en set)",
            time(spoke) / time(fw)
        );
    }
}

/// The bench's own English clips: `tests/stt/sentences.txt` in [`UNSEEN_VOICES`],
/// made once with espeak-ng and sox into `target/stt-test/bench-en`.
fn unseen_english() -> Vec<Clip> {
    let dir = cache_dir().join("bench-en");
    let sentences = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stt/sentences.txt"),
    )
    .expect("tests/stt/sentences.txt");
    let done = dir.join(".done");
    if std::fs::read_to_string(&done).ok().as_deref() != Some(sentences.as_str()) {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for voice in UNSEEN_VOICES {
            for (n, text) in sentences
                .lines()
                .filter(|l| !l.trim().is_empty())
                .enumerate()
            {
                let name = dir.join(format!("{}-{:02}", voice.replace('+', "_"), n + 1));
                let raw = name.with_extension("raw.wav");
                let ok = Command::new("espeak-ng")
                    .args(["-v", voice, "-s", "160", "-w"])
                    .arg(&raw)
                    .arg(text)
                    .status()
                    .is_ok_and(|s| s.success())
                    && Command::new("sox")
                        .arg("-q")
                        .arg(&raw)
                        .args(["-r", "16000", "-c", "1", "-b", "16"])
                        .arg(name.with_extension("wav"))
                        .status()
                        .is_ok_and(|s| s.success());
                assert!(ok, "espeak-ng or sox failed for voice {voice}");
                std::fs::remove_file(&raw).unwrap();
                std::fs::write(name.with_extension("txt"), text).unwrap();
            }
        }
        std::fs::write(&done, &sentences).unwrap();
    }
    clips_in(&dir)
}

/// Runs the spoke's transcriber over `clips` in a child process of this benchmark.
fn spoke(
    model: &Path,
    language: &str,
    languages: &[&str],
    threads: usize,
    reps: usize,
    clips: &[Clip],
) -> Run {
    let job = json!({
        "model": model,
        "language": language,
        "languages": languages,
        "threads": threads,
        "reps": reps,
        "wavs": clips.iter().map(|c| &c.wav).collect::<Vec<_>>(),
    });
    let out = Command::new(std::env::current_exe().expect("this benchmark's path"))
        .env("STT_BENCH_CHILD", job.to_string())
        .output()
        .expect("run the benchmark's child");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Run::from_json(&serde_json::from_slice(&out.stdout).expect("JSON from the child"))
}

/// The child's side of [`spoke`]: one model, one set, JSON on stdout.
fn child(job: &str) {
    let job: Value = serde_json::from_str(job).expect("a job");
    let t = Transcriber::load(&Settings {
        model: PathBuf::from(job["model"].as_str().expect("model")),
        threads: job["threads"].as_u64().expect("threads") as usize,
        language: job["language"].as_str().expect("language").into(),
        languages: job["languages"]
            .as_array()
            .expect("languages")
            .iter()
            .filter_map(|l| l.as_str().map(str::to_string))
            .collect(),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let audios: Vec<Vec<f32>> = job["wavs"]
        .as_array()
        .expect("wavs")
        .iter()
        .map(|w| {
            audio::read_wav_16k(Path::new(w.as_str().expect("wav")))
                .unwrap()
                .0
        })
        .collect();
    t.transcribe(&audios[0]).unwrap(); // warm-up
    let mut passes = Vec::new();
    let mut texts = Vec::new();
    let mut languages = Vec::new();
    for _ in 0..job["reps"].as_u64().expect("reps") {
        texts.clear();
        languages.clear();
        let started = Instant::now();
        for a in &audios {
            let transcript = t.transcribe(a).unwrap();
            texts.push(transcript.text);
            languages.push(transcript.language);
        }
        passes.push(started.elapsed().as_secs_f64());
    }
    let rss_kb = peak_rss_kb();
    println!(
        "{}",
        json!({"passes": passes, "texts": texts, "languages": languages, "rss_kb": rss_kb})
    );
}

/// This process's peak resident set (`VmHWM`), in KiB.
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A Python with faster-whisper: `FASTER_WHISPER_PYTHON`, else a venv under the test
/// cache, made on first use.
fn faster_whisper_python() -> PathBuf {
    if let Some(python) = std::env::var_os("FASTER_WHISPER_PYTHON") {
        return PathBuf::from(python);
    }
    let venv = cache_dir().join("fw-venv");
    let python = venv.join("bin/python");
    let has_it = |p: &Path| {
        Command::new(p)
            .args(["-c", "import faster_whisper"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !has_it(&python) {
        eprintln!("installing faster-whisper into {}", venv.display());
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success())
            && Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "faster-whisper"])
                .status()
                .is_ok_and(|s| s.success());
        assert!(
            ok && has_it(&python),
            "could not install faster-whisper (needs python3-venv and PyPI)"
        );
    }
    python
}

fn faster_whisper(
    python: &Path,
    model: &Path,
    language: &str,
    compute_type: &str,
    threads: usize,
    reps: usize,
    clips: &[Clip],
) -> Run {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/stt_faster_whisper.py");
    let out = Command::new(python)
        .arg(script)
        .arg(model)
        .arg(threads.to_string())
        .arg(compute_type)
        .arg(reps.to_string())
        .arg(language)
        .args(clips.iter().map(|c| &c.wav))
        // CTranslate2 sizes its own thread pools from these too.
        .env("OMP_NUM_THREADS", threads.to_string())
        // Everything is local: never ask the Hugging Face hub.
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Run::from_json(&serde_json::from_slice(&out.stdout).expect("JSON from the script"))
}
