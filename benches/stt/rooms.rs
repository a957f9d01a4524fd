//! The rooms the held-out voices are heard in, made with sox and shared by
//! `benches/stt.rs` (Whisper alone) and `benches/rooms.rs` (the whole hearing chain):
//! reverberation (sox `reverb`), steady pink noise 10 and 5 dB below the speech, three
//! other voices talking 5 dB below (the tests' espeak-ng clips), music 10 dB below
//! (plucked chords). Levels are set against the speech's RMS.

use std::path::Path;
use std::process::Command;

use strawberry_spoke::stt::audio;

pub use crate::support::stt::speech_rms as rms;
use crate::support::stt::{Clip, cache_dir, clips_in};

/// The held-out voices' clips (`benches/stt_voices.sh`, made on first use): the commands
/// alone, or with `wake` each after the wake phrase (its text is the command alone).
pub fn held_out(wake: bool) -> Vec<Clip> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/stt_voices.sh");
    let made = Command::new("bash")
        .arg(&script)
        .args(wake.then_some("wake"))
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        made,
        "{} failed (needs flite, festival, sox)",
        script.display()
    );
    clips_in(&cache_dir().join(if wake {
        "bench-heldout-wake"
    } else {
        "bench-heldout"
    }))
}

/// Every room; `quiet` is the clip as made.
pub const ROOMS: [&str; 6] = [
    "quiet",
    "reverberant",
    "noise-10db",
    "noise-5db",
    "babble",
    "music",
];

/// sox with its random generators seeded (`-R`): the same rooms and noise every run.
fn sox(args: &[&str]) {
    let ok = Command::new("sox")
        .arg("-R")
        .args(args)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "sox {args:?} failed (is sox installed?)");
}

/// The sound under the speech in `room` (`None`: quiet or reverberant), made once in
/// `dir` where sox makes it.
pub fn background(room: &str, dir: &Path) -> Option<Vec<f32>> {
    std::fs::create_dir_all(dir).unwrap();
    let made = |name: &str, args: &[&str]| {
        let path = dir.join(name);
        if !path.exists() {
            let partial = dir.join(format!("partial-{name}"));
            let p = partial.to_str().unwrap();
            let mut all = vec!["-n", "-r", "16000", "-c", "1", "-b", "16", p];
            all.extend_from_slice(args);
            sox(&all);
            std::fs::rename(&partial, &path).unwrap();
        }
        read(&path)
    };
    match room {
        "noise-10db" | "noise-5db" => Some(made(
            "noise.wav",
            &["synth", "60", "pinknoise", "vol", "0.3"],
        )),
        "music" => Some(made(
            "music.wav",
            &[
                "synth", "0.6", "pluck", "C3", "pluck", "E4", "pluck", "G4", "synth", "0.6",
                "pluck", "A2", "pluck", "C4", "pluck", "E4", "fade", "0", "0.6", "0.1", "repeat",
                "99", "vol", "0.3",
            ],
        )),
        "babble" => {
            // Three of the tests' voices, each its sentences one after another.
            let talk: Vec<Vec<f32>> = ["en-us-", "en-gb-0", "en-us_f3-"]
                .iter()
                .map(|voice| {
                    clips_in(&cache_dir().join("wav"))
                        .iter()
                        .filter(|c| {
                            c.wav
                                .file_name()
                                .is_some_and(|n| n.to_string_lossy().starts_with(voice))
                        })
                        .flat_map(|c| read(&c.wav))
                        .collect()
                })
                .collect();
            let len = talk.iter().map(Vec::len).min().unwrap_or(0);
            Some((0..len).map(|i| talk.iter().map(|t| t[i]).sum()).collect())
        }
        _ => None,
    }
}

/// How far below the speech the background of `room` is, dB.
pub fn below_db(room: &str) -> f32 {
    match room {
        "noise-5db" | "babble" => 5.0,
        _ => 10.0,
    }
}

/// `samples` with the stretch of `background` from `n` (each clip its own stretch) under
/// it, `below_db` under `speech_rms`.
pub fn mix(
    samples: &[f32],
    speech_rms: f32,
    background: &[f32],
    n: usize,
    below_db: f32,
) -> Vec<f32> {
    let start = (n * 7919) % background.len().saturating_sub(samples.len()).max(1);
    let part = &background[start..(start + samples.len()).min(background.len())];
    let gain = speech_rms / rms(part).max(1e-9) / 10f32.powf(below_db / 20.0);
    samples
        .iter()
        .zip(part.iter().chain(std::iter::repeat(&0.0)))
        .map(|(s, b)| (s + b * gain).clamp(-1.0, 1.0))
        .collect()
}

/// `input` through sox's reverberation into `output`.
pub fn reverb(input: &Path, output: &Path) {
    sox(&[
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "reverb",
        "60",
        "50",
        "80",
    ]);
}

pub fn read(wav: &Path) -> Vec<f32> {
    audio::read_wav_16k(wav)
        .unwrap_or_else(|e| panic!("{}: {e}", wav.display()))
        .0
}

pub fn write(wav: &Path, samples: &[f32]) {
    strawberry_spoke::audio::wav::write_wav(wav, samples, 16_000)
        .unwrap_or_else(|e| panic!("{}: {e}", wav.display()));
}
