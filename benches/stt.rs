//! Speech to text, the spoke (whisper.cpp via whisper-rs) against faster-whisper, in one
//! run: the same tiny.en weights (faster-whisper's CTranslate2 model and the ggml files
//! `model import-ct2` makes from it), the same WAVs (`tests/setup.sh`: espeak-ng in four
//! voices, 16 kHz), the same thread count, greedy decoding on both sides.
//!
//! `cargo bench --bench stt` (after `tests/setup.sh`). faster-whisper is installed from
//! PyPI into `target/stt-test/fw-venv` on first use. `STT_BENCH_THREADS` (default 2) and
//! `STT_BENCH_REPS` (default 5) change the thread count and passes over the set.
//! Under `cargo test` this target only checks that it was built.

#[path = "../tests/support/stt.rs"]
mod stt_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use strawberry_spoke::stt::{Settings, Transcriber, audio};
use stt_support::{cache_dir, clips, ct2_dir, ggml_model, word_error_rate};

/// One system's figures over the set.
struct Row {
    name: String,
    /// Seconds per pass over the whole set, one per pass.
    passes: Vec<f64>,
    texts: Vec<String>,
}

impl Row {
    fn median(&self) -> f64 {
        let mut p = self.passes.clone();
        p.sort_by(f64::total_cmp);
        p[p.len() / 2]
    }
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("stt benchmark: run it with `cargo bench --bench stt`");
        return;
    }
    let threads = env_number("STT_BENCH_THREADS", 2);
    let reps = env_number("STT_BENCH_REPS", 5);
    let clips = clips();
    let references: Vec<&str> = clips.iter().map(|c| c.text.as_str()).collect();
    let audio_seconds: f64 = clips
        .iter()
        .map(|c| {
            let (s, _) = audio::read_wav_16k(&c.wav).unwrap();
            s.len() as f64 / 16_000.0
        })
        .sum();

    let mut rows = Vec::new();
    for quantize in ["q8_0", "f16"] {
        rows.push(spoke(
            &ggml_model(quantize),
            quantize,
            threads,
            reps,
            &clips,
        ));
    }
    let python = faster_whisper_python();
    for compute_type in ["int8", "float32"] {
        rows.push(faster_whisper(&python, compute_type, threads, reps, &clips));
    }

    println!(
        "\n{} clips, {:.1} s of speech, {threads} threads, median of {reps} passes\n",
        clips.len(),
        audio_seconds
    );
    println!("| system | s per pass | ms per clip | word error rate |");
    println!("| --- | --- | --- | --- |");
    for row in &rows {
        let wer = word_error_rate(
            references
                .iter()
                .copied()
                .zip(row.texts.iter().map(String::as_str)),
        );
        println!(
            "| {} | {:.3} | {:.0} | {:.1}% |",
            row.name,
            row.median(),
            row.median() * 1000.0 / clips.len() as f64,
            wer * 100.0
        );
    }
    let fastest_fw = rows
        .iter()
        .filter(|r| r.name.starts_with("faster-whisper"))
        .min_by(|a, b| a.median().total_cmp(&b.median()))
        .expect("faster-whisper rows");
    println!();
    for row in rows.iter().filter(|r| r.name.starts_with("spoke")) {
        println!(
            "{} takes {:.2}x the time of {} (target: at most 0.50x)",
            row.name,
            row.median() / fastest_fw.median(),
            fastest_fw.name
        );
    }
}

fn spoke(
    model: &Path,
    quantize: &str,
    threads: usize,
    reps: usize,
    clips: &[stt_support::Clip],
) -> Row {
    let t = Transcriber::load(&Settings {
        model: model.to_path_buf(),
        threads,
        language: "en".into(),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let audios: Vec<Vec<f32>> = clips
        .iter()
        .map(|c| audio::read_wav_16k(&c.wav).unwrap().0)
        .collect();
    t.transcribe(&audios[0]).unwrap(); // warm-up
    let mut passes = Vec::new();
    let mut texts = Vec::new();
    for _ in 0..reps {
        texts.clear();
        let started = Instant::now();
        for a in &audios {
            texts.push(t.transcribe(a).unwrap().text);
        }
        passes.push(started.elapsed().as_secs_f64());
    }
    Row {
        name: format!("spoke, whisper.cpp {quantize}"),
        passes,
        texts,
    }
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
    compute_type: &str,
    threads: usize,
    reps: usize,
    clips: &[stt_support::Clip],
) -> Row {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/stt_faster_whisper.py");
    let out = Command::new(python)
        .arg(script)
        .arg(ct2_dir())
        .arg(threads.to_string())
        .arg(compute_type)
        .arg(reps.to_string())
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
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("JSON from the script");
    let passes = json["passes"]
        .as_array()
        .expect("passes")
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    let texts = json["texts"]
        .as_array()
        .expect("texts")
        .iter()
        .map(|t| t.as_str().unwrap_or_default().to_string())
        .collect();
    Row {
        name: format!("faster-whisper {compute_type}"),
        passes,
        texts,
    }
}
