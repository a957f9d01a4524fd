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
//! A second part (`heldout`) runs the spoke as a new user would against faster-whisper
//! with its default settings, on voices of other synthesizers (flite, festival) that no
//! test uses, quiet and in rooms: word errors, transcript length against what was said,
//! and each command's time ([`heldout`]). In the quiet room the spoke also runs the f16
//! weights (what q8_0 costs), both decode without timestamps too (what they give), and
//! with `STT_BENCH_BEAM=1` the spoke decodes with a beam of 5 (`stt.beam_size`,
//! faster-whisper's default), for what a beam costs and gives.
//!
//! `cargo bench --bench stt` (after `tests/setup.sh`); `-- models` or `-- heldout` runs
//! one part. faster-whisper is installed from
//! PyPI into `target/stt-test/fw-venv` on first use. `STT_BENCH_THREADS` (default 2) and
//! `STT_BENCH_REPS` (default 3) change the thread count and passes over the sets;
//! `STT_BENCH_TIMEOUT_MS` (default: `stt.timeout_ms`'s) the spoke's limit per command,
//! so that on a loaded machine the words measured are not cut short by the time.
//! Under `cargo test` this target only checks that it was built.

#[path = "../tests/support/mod.rs"]
#[allow(dead_code, reason = "a benchmark uses a few of the test helpers")]
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strawberry_spoke::stt::{DEFAULT_BEAM_SIZE, DEFAULT_TIMESTAMPS, Settings, Transcriber, audio};
use stt::{
    Clip, base_model, cache_dir, clips, clips_in, ct2_dir, ggml_model, lang_clips, word_error_rate,
};

use support::stt;

#[path = "stt/rooms.rs"]
mod rooms;

/// English voices no test uses, for the accuracy docs/voice-loop.md gives for unseen voices.
const UNSEEN_VOICES: [&str; 4] = ["en-029", "en-gb-scotland+m2", "en-us+f4", "en-gb-x-gbcwmd"];

/// How the spoke decodes: `stt.beam_size`, and whether with timestamps.
#[derive(Debug, Clone, Copy)]
struct Decoding {
    beam: usize,
    timestamps: bool,
}

/// Greedy decoding, as the `models` part compares it with faster-whisper's greedy
/// decoding.
const GREEDY: Decoding = Decoding {
    beam: 1,
    timestamps: false,
};

/// The daemon's decoding.
const DEFAULT: Decoding = Decoding {
    beam: DEFAULT_BEAM_SIZE,
    timestamps: DEFAULT_TIMESTAMPS,
};

/// The held-out rows with a beam: faster-whisper's default.
const BEAM: Decoding = Decoding { beam: 5, ..DEFAULT };

/// The held-out rows without timestamps: the daemon's decoding until 2026-11-27.
const NO_TIMESTAMPS: Decoding = Decoding {
    timestamps: false,
    ..DEFAULT
};

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
    /// Each clip's seconds, in every pass.
    clip_secs: Vec<f64>,
    texts: Vec<String>,
    languages: Vec<String>,
    /// The spoke's verdict on each clip (empty for the other systems).
    verdicts: Vec<String>,
    /// whisper.cpp decodes per clip (empty for the other systems).
    decodes: Vec<f64>,
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
        let numbers = |key: &str| -> Vec<f64> {
            json[key]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default()
        };
        Run {
            passes: numbers("passes"),
            clip_secs: numbers("clip_secs"),
            texts: strings("texts"),
            languages: strings("languages"),
            verdicts: strings("verdicts"),
            decodes: numbers("decodes"),
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
    let python = faster_whisper_python();
    // `cargo bench --bench stt -- heldout` (or `-- models`) runs one part only.
    let only = |part: &str| {
        let parts = ["models", "heldout"];
        let chosen: Vec<String> = std::env::args()
            .filter(|a| parts.contains(&a.as_str()))
            .collect();
        chosen.is_empty() || chosen.iter().any(|c| c == part)
    };
    if only("models") {
        models(&python, threads, reps);
    }
    if only("heldout") {
        heldout(&python, threads, reps);
    }
}

/// Which model to recommend: every model and quantisation against faster-whisper
/// (greedy) on the tests' voices and languages.
fn models(python: &Path, threads: usize, reps: usize) {
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
                let run = spoke(&model, "en", &[], GREEDY, threads, reps, clips);
                add(format!("spoke tiny.en {quantize}"), set, run);
            }
            let model = base_model(quantize);
            let run = spoke(&model, language, &[], GREEDY, threads, reps, clips);
            add(format!("spoke base {quantize}"), set, run);
        }
        let run = spoke(
            &base_model("q8_0"),
            "auto",
            &HOUSEHOLD,
            GREEDY,
            threads,
            reps,
            clips,
        );
        add("spoke base q8_0, auto (en/de/fr/es)".into(), set, run);
        for compute_type in ["int8", "float32"] {
            if english(set) {
                let run = faster_whisper(
                    python,
                    &ct2_dir(),
                    "en",
                    "greedy",
                    compute_type,
                    (threads, reps),
                    clips,
                );
                add(format!("faster-whisper tiny.en {compute_type}"), set, run);
            }
            let run = faster_whisper(
                python,
                &base_ct2,
                language,
                "greedy",
                compute_type,
                (threads, reps),
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
                        .args(["-R", "-q"])
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
    decoding: Decoding,
    threads: usize,
    reps: usize,
    clips: &[Clip],
) -> Run {
    let timeout_ms = std::env::var("STT_BENCH_TIMEOUT_MS")
        .ok()
        .and_then(|t| t.parse::<u64>().ok());
    let job = json!({
        "model": model,
        "language": language,
        "languages": languages,
        "beam": decoding.beam,
        "timestamps": decoding.timestamps,
        "timeout_ms": timeout_ms,
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
        timeout: job["timeout_ms"].as_u64().map_or(
            strawberry_spoke::stt::DEFAULT_TIMEOUT,
            Duration::from_millis,
        ),
        beam_size: job["beam"].as_u64().expect("beam") as usize,
        timestamps: job["timestamps"].as_bool().unwrap_or(DEFAULT_TIMESTAMPS),
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
    let mut clip_secs = Vec::new();
    let mut texts = Vec::new();
    let mut languages = Vec::new();
    let mut verdicts = Vec::new();
    let mut decodes = Vec::new();
    for _ in 0..job["reps"].as_u64().expect("reps") {
        texts.clear();
        languages.clear();
        verdicts.clear();
        decodes.clear();
        let started = Instant::now();
        for a in &audios {
            let clip_started = Instant::now();
            let transcript = t.transcribe(a).unwrap();
            clip_secs.push(clip_started.elapsed().as_secs_f64());
            texts.push(transcript.text);
            languages.push(transcript.language);
            verdicts.push(transcript.verdict.as_str());
            decodes.push(transcript.decodes);
        }
        passes.push(started.elapsed().as_secs_f64());
    }
    let rss_kb = peak_rss_kb();
    println!(
        "{}",
        json!({"passes": passes, "clip_secs": clip_secs, "texts": texts, "languages": languages,
               "verdicts": verdicts, "decodes": decodes, "rss_kb": rss_kb})
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
    settings: &str,
    compute_type: &str,
    (threads, reps): (usize, usize),
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
        .arg(settings)
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

/// Held-out voices, the guard against loops and invented words: commands in voices of
/// synthesizers no test uses (`benches/stt_voices.sh`: flite and festival), the spoke
/// as a new user runs it (base q8_0 with the default `auto` language among en/de/fr/es,
/// and tiny.en) against faster-whisper with its default settings on the same weights;
/// with `STT_BENCH_BEFORE` (a `strawberry-spoke` binary of another commit, e.g. one built
/// before the checks), that binary's `transcribe` on the same clips, for what a change
/// does. Quiet unless `STT_BENCH_NO_QUIET` is set (a room measured after a quiet run); the
/// other rooms of [`rooms::ROOMS`] with `STT_BENCH_ROOMS=all` (or a comma-separated list).
fn heldout(python: &Path, threads: usize, reps: usize) {
    let quiet = rooms::held_out(false);
    let wanted = std::env::var("STT_BENCH_ROOMS").unwrap_or_default();
    let with_quiet = std::env::var_os("STT_BENCH_NO_QUIET").is_none();
    let chosen: Vec<&str> = rooms::ROOMS
        .into_iter()
        .filter(|r| {
            (*r == "quiet" && with_quiet)
                || (*r != "quiet" && (wanted == "all" || wanted.split(',').any(|w| w == *r)))
        })
        .collect();
    let before = std::env::var_os("STT_BENCH_BEFORE").map(PathBuf::from);
    println!(
        "\nheld-out voices: {} clips ({} commands x {} voices), {threads} threads, {reps} pass(es)",
        quiet.len(),
        quiet.len() / 6,
        6
    );
    for room in chosen {
        let clips = if room == "quiet" {
            quiet.clone()
        } else {
            in_room(&quiet, room)
        };
        let mut rows: Vec<(String, Run)> = Vec::new();
        let base = |quantize, decoding| {
            spoke(
                &base_model(quantize),
                "auto",
                &HOUSEHOLD,
                decoding,
                threads,
                reps,
                &clips,
            )
        };
        let tiny = |quantize, decoding| {
            spoke(
                &ggml_model(quantize),
                "en",
                &[],
                decoding,
                threads,
                reps,
                &clips,
            )
        };
        rows.push((
            "spoke base q8_0 (auto: en/de/fr/es)".into(),
            base("q8_0", DEFAULT),
        ));
        rows.push(("spoke tiny.en q8_0".into(), tiny("q8_0", DEFAULT)));
        if room == "quiet" {
            // The same weights as faster-whisper's, unquantised: what q8_0 costs.
            rows.push((
                "spoke base f16 (auto: en/de/fr/es)".into(),
                base("f16", DEFAULT),
            ));
            rows.push(("spoke tiny.en f16".into(), tiny("f16", DEFAULT)));
            // Decoding without timestamps, as the daemon did before 2026-11-27.
            rows.push((
                "spoke base q8_0 (auto: en/de/fr/es), no timestamps".into(),
                base("q8_0", NO_TIMESTAMPS),
            ));
            rows.push((
                "spoke tiny.en q8_0, no timestamps".into(),
                tiny("q8_0", NO_TIMESTAMPS),
            ));
        }
        // What a beam costs and gives, in the quiet room (measured 2026-11-26: not
        // worth it; `STT_BENCH_BEAM=1` measures it again).
        if room == "quiet" && std::env::var_os("STT_BENCH_BEAM").is_some() {
            rows.push(("spoke base q8_0, beam 5".into(), base("q8_0", BEAM)));
            rows.push(("spoke tiny.en q8_0, beam 5".into(), tiny("q8_0", BEAM)));
        }
        if let Some(bin) = &before {
            rows.push((
                "spoke base q8_0, STT_BENCH_BEFORE's binary".into(),
                spoke_binary(bin, &base_model("q8_0"), "auto", threads, reps, &clips),
            ));
            rows.push((
                "spoke tiny.en q8_0, STT_BENCH_BEFORE's binary".into(),
                spoke_binary(bin, &ggml_model("q8_0"), "en", threads, reps, &clips),
            ));
        }
        rows.push((
            "faster-whisper base int8, defaults".into(),
            faster_whisper(
                python,
                &cache_dir().join("base-ct2"),
                "auto",
                "defaults",
                "int8",
                (threads, reps),
                &clips,
            ),
        ));
        rows.push((
            "faster-whisper tiny.en int8, defaults".into(),
            faster_whisper(
                python,
                &ct2_dir(),
                "en",
                "defaults",
                "int8",
                (threads, reps),
                &clips,
            ),
        ));
        // What decoding with timestamps gives faster-whisper (its default) on these.
        if room == "quiet" {
            for (name, model, language) in [
                ("base", cache_dir().join("base-ct2"), "auto"),
                ("tiny.en", ct2_dir(), "en"),
            ] {
                rows.push((
                    format!("faster-whisper {name} int8, defaults without timestamps"),
                    faster_whisper(
                        python,
                        &model,
                        language,
                        "defaults-no-timestamps",
                        "int8",
                        (threads, reps),
                        &clips,
                    ),
                ));
            }
        }
        println!("\nroom: {room}\n");
        println!(
            "| system | WER | longest transcript / said | over 2x | ms per command: median / max | fell back | no transcript |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- |");
        for (name, run) in &rows {
            print_heldout_row(name, run, &clips);
        }
        for (name, run) in &rows {
            for (clip, text) in clips.iter().zip(&run.texts) {
                let ratio = length_ratio(&clip.text, text);
                if ratio > 1.5 || word_error_rate([(clip.text.as_str(), text.as_str())]) > 0.5 {
                    println!(
                        "  {name}: {}: said {:?}, got {text:?}",
                        clip.wav.file_name().unwrap_or_default().to_string_lossy(),
                        clip.text
                    );
                }
            }
        }
    }
}

fn print_heldout_row(name: &str, run: &Run, clips: &[Clip]) {
    let wer = word_error_rate(
        clips
            .iter()
            .map(|c| c.text.as_str())
            .zip(run.texts.iter().map(String::as_str)),
    );
    let ratios: Vec<f64> = clips
        .iter()
        .zip(&run.texts)
        .map(|(c, t)| length_ratio(&c.text, t))
        .collect();
    let longest = ratios.iter().copied().fold(0.0, f64::max);
    let over = ratios.iter().filter(|r| **r > 2.0).count();
    let mut secs = run.clip_secs.clone();
    secs.sort_by(f64::total_cmp);
    let median = secs.get(secs.len() / 2).copied().unwrap_or(0.0);
    let max = secs.last().copied().unwrap_or(0.0);
    let (fell_back, dropped) = if run.verdicts.is_empty() {
        ("-".to_string(), "-".to_string())
    } else {
        (
            run.decodes.iter().filter(|d| **d > 1.0).count().to_string(),
            run.verdicts
                .iter()
                .zip(&run.texts)
                .filter(|(v, t)| t.is_empty() && *v != "silence")
                .count()
                .to_string(),
        )
    };
    println!(
        "| {name} | {:.1}% | {longest:.2} | {over} | {:.0} / {:.0} | {fell_back} | {dropped} |",
        wer * 100.0,
        median * 1000.0,
        max * 1000.0
    );
}

/// Words transcribed over words said.
fn length_ratio(said: &str, heard: &str) -> f64 {
    stt::normalise(heard).len() as f64 / stt::normalise(said).len().max(1) as f64
}

/// `clips` as heard in `room` ([`rooms`]), made once under `target/stt-test/bench-rooms`.
fn in_room(clips: &[Clip], room: &str) -> Vec<Clip> {
    let dir = cache_dir().join("bench-rooms").join(room);
    let done = dir.join(".done");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Beside the clips, not among them.
        let background = rooms::background(room, &dir.join("background"));
        for (n, clip) in clips.iter().enumerate() {
            let out = dir.join(clip.wav.file_name().unwrap());
            match &background {
                None => rooms::reverb(&clip.wav, &out),
                Some(background) => {
                    let speech = rooms::read(&clip.wav);
                    let mixed = rooms::mix(
                        &speech,
                        rooms::rms(&speech),
                        background,
                        n,
                        rooms::below_db(room),
                    );
                    rooms::write(&out, &mixed);
                }
            }
            std::fs::copy(clip.wav.with_extension("txt"), out.with_extension("txt")).unwrap();
        }
        std::fs::write(&done, "").unwrap();
    }
    clips_in(&dir)
}

/// A `strawberry-spoke` binary's `transcribe` on each clip (one process per clip; the
/// inference time it prints, model loading excluded).
fn spoke_binary(
    bin: &Path,
    model: &Path,
    language: &str,
    threads: usize,
    reps: usize,
    clips: &[Clip],
) -> Run {
    let mut clip_secs = Vec::new();
    let mut texts = Vec::new();
    for _ in 0..reps {
        texts.clear();
        for clip in clips {
            let out = Command::new(bin)
                .arg("transcribe")
                .arg(&clip.wav)
                .env("STRAWBERRY_SPOKE__STT__MODEL", model)
                .env("STRAWBERRY_SPOKE__STT__LANGUAGE", language)
                .env("STRAWBERRY_SPOKE__STT__THREADS", threads.to_string())
                .envs(
                    std::env::var("STT_BENCH_TIMEOUT_MS")
                        .ok()
                        .map(|ms| ("STRAWBERRY_SPOKE__STT__TIMEOUT_MS", ms)),
                )
                .output()
                .expect("run STT_BENCH_BEFORE's binary");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{stderr}");
            let ms: f64 = stderr
                .split("inference ")
                .nth(1)
                .and_then(|rest| rest.split(" ms").next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no inference time in {stderr}"));
            clip_secs.push(ms / 1000.0);
            texts.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
        }
    }
    Run {
        passes: Vec::new(),
        clip_secs,
        texts,
        languages: Vec::new(),
        verdicts: Vec::new(),
        decodes: Vec::new(),
        rss_mb: 0.0,
    }
}
