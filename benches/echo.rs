//! Echo cancellation: how much quieter the spoke's own reply is at its microphone with
//! the canceller (ERLE), whether "hey strawberry" said during a reply is still found by
//! the wake word, whether the reply alone wakes it, and the CPU per 10 ms block. The
//! canceller on and off in the same run, on the same audio; with the `webrtc-aec`
//! feature, the daemon's AEC3 (`sonora`, pure Rust) and WebRTC's own C++ AEC3 (the
//! `webrtc-audio-processing` crate) side by side.
//!
//! The room is simulated (no real board's speaker and microphone were used): the reply
//! (espeak-ng en-us sentences from `tests/setup.sh`) is played at 48 kHz through the
//! canceller's reference as a speaker callback would, and heard after `DELAY` ms through
//! a reverberant tail, attenuated, with noise; the wake phrase recordings of
//! `tests/setup.sh` (other voices) are said 2.5 s into the reply (the canceller still
//! finding the echo) or 8 s in (found), 10 dB below the echo. Both bundled wake words
//! listen: the reference word at its default sensitivity and the neural word at `high`.
//!
//! `cargo bench --bench echo --features webrtc-aec` (after `tests/setup.sh` and, for the
//! C++ peer, `packaging/webrtc-deps.sh`); without the feature, sonora alone. Under
//! `cargo test` this target only checks that it builds.

#[path = "../tests/support/room.rs"]
mod room;

use std::path::{Path, PathBuf};
use std::time::Duration;

use room::{echo_of, noise, play_and_cancel};
use strawberry_spoke::audio::echo::{self, Engine, Extras};
use strawberry_spoke::audio::wav::read_wav_16k;
use strawberry_spoke::audio::{FRAME_SAMPLES, SAMPLE_RATE};
use strawberry_spoke::wake::{Detector, Sensitivity, Settings, WakeWord};

const SR: usize = SAMPLE_RATE as usize;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("echo benchmark: run it with `cargo bench --bench echo`");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/stt-test");
    let reply: Vec<f32> = (1..=6)
        .flat_map(|n| {
            let mut s = read(&root.join(format!("wav/en-us-{n:02}.wav")));
            s.extend(vec![0.0; SR / 5]);
            s
        })
        .collect();
    let mut phrases: Vec<PathBuf> = std::fs::read_dir(root.join("wake/phrase"))
        .expect("target/stt-test/wake/phrase (run tests/setup.sh)")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "wav"))
        .collect();
    phrases.sort();
    // Both bundled words: the residual echo is speech-like, which the neural word was
    // trained to ignore (babble) and the reference word was not.
    let words = [
        (
            "reference",
            WakeWord::bundled_reference().expect("the bundled reference word"),
            Settings::default(),
        ),
        (
            "neural, high",
            WakeWord::bundled_neural().expect("the bundled neural word"),
            Settings {
                sensitivity: Sensitivity::High,
                ..Settings::default()
            },
        ),
    ];

    let none = Extras::default();
    let ns = Extras {
        noise_suppression: true,
        gain_control: false,
    };
    let ns_agc = Extras {
        noise_suppression: true,
        gain_control: true,
    };
    let engines = [
        (Engine::Sonora, none),
        #[cfg(feature = "webrtc-aec")]
        (Engine::WebRtc, none),
        (Engine::Sonora, ns),
        (Engine::Sonora, ns_agc),
    ];
    println!(
        "| phrase said | delay | echo gain | AEC3 | ERLE dB | delay found (ms) | wake word | wake phrase during the reply found, off | on | reply alone woke it, off | on | CPU per 10 ms block |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let cases = [
        (2_500, 30, 0.6),
        (2_500, 80, 0.6),
        (2_500, 150, 0.6),
        (8_000, 30, 0.6),
        (8_000, 80, 0.6),
        (8_000, 150, 0.6),
        (8_000, 80, 0.3),
    ];
    for ((at_ms, delay_ms, echo_gain), engine) in cases
        .into_iter()
        .flat_map(|case| engines.map(|engine| (case, engine)))
    {
        let mut found = [[0usize; 2]; 2];
        let mut erle = Vec::new();
        let mut delays = Vec::new();
        let mut cpu = Duration::ZERO;
        let mut blocks = 0u32;
        let mut self_wakes = [[0usize; 2]; 2];
        for (n, phrase) in phrases.iter().enumerate() {
            let person = read(phrase);
            let scene = Scene::new(&reply, &person, at_ms, delay_ms, echo_gain, n as u64);
            let (out, took, stats) = scene.cancel(engine);
            cpu += took;
            blocks += (scene.mic.len() / (SR / 100)) as u32;
            delays.push(stats.delay_ms.unwrap_or(0));
            erle.push(scene.erle(&out));
            for ((_, word, settings), found) in words.iter().zip(&mut found) {
                for (i, audio) in [&scene.mic, &out].into_iter().enumerate() {
                    let at = scene.person_at;
                    let hits = detect(word, settings, audio);
                    if hits
                        .iter()
                        .any(|&end| end > at && end < at + person.len() + SR / 2)
                    {
                        found[i] += 1;
                    }
                }
            }
            // The reply alone, no person: does it wake the spoke?
            if n == 0 {
                let quiet = Scene::new(&reply, &[], at_ms, delay_ms, echo_gain, 99);
                let (out, _, _) = quiet.cancel(engine);
                for ((_, word, settings), woke) in words.iter().zip(&mut self_wakes) {
                    for (i, audio) in [&quiet.mic, &out].into_iter().enumerate() {
                        woke[i] += detect(word, settings, audio).len();
                    }
                }
            }
        }
        erle.sort_by(f64::total_cmp);
        delays.sort();
        let engine_name = match engine {
            (Engine::Sonora, e) if e == none => "sonora (Rust)",
            (Engine::Sonora, e) if e == ns => "sonora + noise suppression",
            (Engine::Sonora, _) => "sonora + noise suppression + AGC2",
            #[cfg(feature = "webrtc-aec")]
            (Engine::WebRtc, _) => "WebRTC (C++)",
        };
        for (((word, _, _), found), woke) in words.iter().zip(found).zip(self_wakes) {
            println!(
                "| {:.1} s into the reply | {delay_ms} ms | {:.0} dB | {engine_name} | {:.1} (median of {}) | {} (median) | {word} | {}/{} | {}/{} | {} | {} | {:.0} µs |",
                at_ms as f64 / 1000.0,
                20.0 * f64::from(echo_gain).log10(),
                erle[erle.len() / 2],
                erle.len(),
                delays[delays.len() / 2],
                found[0],
                phrases.len(),
                found[1],
                phrases.len(),
                woke[0],
                woke[1],
                cpu.as_secs_f64() * 1e6 / f64::from(blocks),
            );
        }
    }
}

fn read(path: &Path) -> Vec<f32> {
    read_wav_16k(path)
        .unwrap_or_else(|e| panic!("{}: {e} (run tests/setup.sh)", path.display()))
        .0
}

/// Where the wake word fired, as sample positions.
fn detect(word: &WakeWord, settings: &Settings, audio: &[f32]) -> Vec<usize> {
    let mut detector = Detector::with_word(settings, word).expect("detector");
    let mut ends = Vec::new();
    for chunk in audio.chunks(FRAME_SAMPLES) {
        if !detector.process(chunk).is_empty() {
            ends.push(detector.position() as usize);
        }
    }
    ends
}

struct Scene {
    render: Vec<f32>,
    mic: Vec<f32>,
    reply_end: usize,
    person_at: usize,
    person_len: usize,
}

impl Scene {
    fn new(
        reply: &[f32],
        person: &[f32],
        at_ms: usize,
        delay_ms: usize,
        gain: f32,
        seed: u64,
    ) -> Scene {
        let mut render = vec![0.0f32; SR];
        render.extend(reply);
        let reply_end = render.len();
        render.resize((reply_end + SR) / FRAME_SAMPLES * FRAME_SAMPLES, 0.0);
        let len = render.len();
        let mut mic = echo_of(&render, delay_ms, gain, len);
        // The person 10 dB below the echo's level, `at_ms` into the reply.
        let person_at = SR + at_ms * SR / 1000;
        let scale = if person.is_empty() {
            0.0
        } else {
            let echo_rms = rms(&mic[SR..reply_end]);
            echo_rms / rms(person).max(1e-6) * 10f32.powf(-10.0 / 20.0)
        };
        for (i, &p) in person.iter().enumerate() {
            if let Some(m) = mic.get_mut(person_at + i) {
                *m += p * scale;
            }
        }
        let mut seed = seed + 1;
        for m in &mut mic {
            *m += 0.002 * noise(&mut seed);
        }
        Scene {
            render,
            mic,
            reply_end,
            person_at,
            person_len: person.len(),
        }
    }

    /// Runs the microphone through a fresh canceller with the render played alongside.
    fn cancel(&self, (engine, extras): (Engine, Extras)) -> (Vec<f32>, Duration, echo::EchoStats) {
        let (reference, mut canceller) = echo::pair_with(engine, extras).expect("canceller");
        let (out, took) = play_and_cancel(&reference, &mut canceller, &self.render, &self.mic, 0);
        (out, took, canceller.stats())
    }

    /// ERLE over the reply from its 4th second on, outside the person's speech.
    fn erle(&self, out: &[f32]) -> f64 {
        let (mut pm, mut po) = (0f64, 0f64);
        let busy = self.person_at.saturating_sub(SR / 4)..self.person_at + self.person_len + SR / 4;
        let span = 4 * SR..self.reply_end;
        for (i, (&m, &o)) in span
            .clone()
            .zip(self.mic[span.clone()].iter().zip(&out[span]))
        {
            if !busy.contains(&i) {
                pm += f64::from(m).powi(2);
                po += f64::from(o).powi(2);
            }
        }
        10.0 * (pm / po.max(1e-20)).log10()
    }
}

fn rms(x: &[f32]) -> f32 {
    (x.iter().map(|s| s * s).sum::<f32>() / x.len().max(1) as f32).sqrt()
}
