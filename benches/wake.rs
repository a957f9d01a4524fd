//! Wake word CPU cost: how long the bundled "hey strawberry" detector takes per second
//! of audio (the reference word and the neural word, one after the other), on the other-speech and noise files of `tests/setup.sh` (what a spoke
//! hears nearly all the time: the cost is the same whether or not the phrase is in it).
//!
//! `cargo bench --bench wake` (after `tests/setup.sh`). `WAKE_BENCH_REPS` (default 3)
//! sets the passes over the set. Under `cargo test` this target only runs a second of
//! synthetic audio through the detector, to show that it builds and runs.

use std::path::Path;
use std::time::Instant;

use strawberry_spoke::stt::audio;
use strawberry_spoke::wake::{Detector, SAMPLE_RATE, Settings, WakeWord};

/// What the sound card hands over at a time (20 ms at 16 kHz).
const CHUNK: usize = 320;

fn main() {
    let words = [
        (
            "reference",
            WakeWord::bundled_reference().expect("the reference word"),
        ),
        (
            "neural",
            WakeWord::bundled_neural().expect("the neural word"),
        ),
    ];
    if !std::env::args().any(|a| a == "--bench") {
        let tone: Vec<f32> = (0..SAMPLE_RATE)
            .map(|i| (i as f32 * 0.05).sin() * 0.1)
            .collect();
        for (_, word) in &words {
            let mut detector = Detector::with_word(&Settings::default(), word).expect("detector");
            let found = detector.process(&tone);
            assert!(found.is_empty() && detector.position() == u64::from(SAMPLE_RATE));
        }
        println!("wake benchmark: run it with `cargo bench --bench wake`");
        return;
    }
    let reps: usize = std::env::var("WAKE_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(3);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/stt-test/wake/other");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (run tests/setup.sh)", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    files.sort();
    for (label, word) in &words {
        println!("\n### {label} word\n");
        measure(word, &files, reps);
    }
}

fn measure(word: &WakeWord, files: &[std::path::PathBuf], reps: usize) {
    println!("| audio | seconds | CPU ms per audio second (median of {reps}) | % of one core |");
    println!("| --- | --- | --- | --- |");
    let (mut all_audio, mut all_busy) = (0.0, 0.0);
    for file in files {
        let (samples, _) = audio::read_wav_16k(file).expect("WAV");
        let seconds = samples.len() as f64 / f64::from(SAMPLE_RATE);
        let mut passes = Vec::new();
        for _ in 0..reps {
            let mut detector = Detector::with_word(&Settings::default(), word).expect("detector");
            let cpu = cpu_time();
            for chunk in samples.chunks(CHUNK) {
                detector.process(chunk);
            }
            passes.push(cpu_time() - cpu);
        }
        passes.sort_by(f64::total_cmp);
        let busy = passes[passes.len() / 2];
        all_audio += seconds;
        all_busy += busy;
        println!(
            "| {} | {seconds:.0} | {:.2} | {:.2}% |",
            file.file_name().unwrap_or_default().to_string_lossy(),
            busy / seconds * 1000.0,
            busy / seconds * 100.0
        );
    }
    println!(
        "| all | {all_audio:.0} | {:.2} | {:.2}% |",
        all_busy / all_audio * 1000.0,
        all_busy / all_audio * 100.0
    );
    let started = Instant::now();
    let _ = Detector::with_word(&Settings::default(), word);
    println!(
        "\nmaking a detector with the word: {:.2} ms",
        started.elapsed().as_secs_f64() * 1000.0
    );
}

/// This thread's CPU time in seconds: what the detector costs, not the wall clock of a
/// shared machine.
fn cpu_time() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}
