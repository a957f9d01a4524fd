//! Echo cancellation: how much quieter the spoke's own reply is at its microphone with
//! the canceller (ERLE), whether "hey strawberry" said during a reply is still found by
//! the wake word, whether replies alone wake it, and the CPU per 10 ms block. Every
//! canceller and the microphone as heard ("off") in the same run, on the same audio: the
//! daemon's ([`echo::barge_in_config`], AEC3 driven block by block), sonora's
//! AudioProcessing with AEC3's default configuration, AEC3's linear filter output (before
//! its residual echo suppressor), and with the `webrtc-aec` feature WebRTC's own C++ AEC3
//! (the `webrtc-audio-processing` crate).
//!
//! The rooms are simulated (no real board's speaker and microphone were used): the reply
//! (espeak-ng en-us sentences from `tests/setup.sh`) is played at 48 kHz through the
//! canceller's reference as a speaker callback would, and heard after a delay through a
//! reverberant tail, attenuated, with noise; in the "soft-clipping speaker" room the
//! played signal is first bent by a speaker's nonlinearity, which no linear filter can
//! follow. The wake phrase recordings of `tests/setup.sh` (other voices) are said 2.5 s
//! into the reply (the canceller still finding the echo) or 8 s in (found), 10 dB below
//! the echo (one harder point: 15 dB). The bundled wake words listen as the daemon's do:
//! the reference word at its default sensitivity, the neural word at `medium` (the
//! default) and at `high`, each told frame by frame whether the canceller is taking played
//! sound out (`Detector::set_over_echo`: the neural word's run then goes on through short
//! dips, as in the daemon), and the neural word at `medium` once more without being told
//! (what that rule gains). "Replies alone" plays every sentence of the four voices of
//! `tests/setup.sh` (40 replies, 2.5 min) with no person.
//!
//! `cargo bench --bench echo` (after `tests/setup.sh`); `--features webrtc-aec` (after
//! `packaging/webrtc-deps.sh`) adds the C++ peer. Arguments after `--bench`: `--configs
//! a,b` runs only the cancellers whose names contain one of those words (`--configs ns`
//! for sonora's noise suppression and AGC2 after AEC3, which are not run otherwise),
//! `--quick` only two cases per room. Under `cargo test` this target only checks that it
//! builds.

#[path = "../tests/support/room.rs"]
mod room;

use std::path::{Path, PathBuf};
use std::time::Duration;

use room::{Cancelled, echo_of, noise, play_and_cancel};
use sonora_aec3::config::EchoCanceller3Config;
use strawberry_spoke::audio::echo::{self, Engine, Extras};
use strawberry_spoke::audio::wav::read_wav_16k;
use strawberry_spoke::audio::{FRAME_SAMPLES, SAMPLE_RATE};
use strawberry_spoke::wake::{Detector, Sensitivity, Settings, WakeWord};

const SR: usize = SAMPLE_RATE as usize;

/// A canceller under test: its name in the table, its engine and what runs after it.
struct Config {
    name: &'static str,
    engine: Engine,
    extras: Extras,
}

/// Where the microphone is: how the speaker's sound reaches it.
#[derive(Clone, Copy)]
enum Room {
    Linear,
    /// The speaker soft-clips: `tanh(k x) / k` of what is played (k = 2: a sentence's
    /// peaks at 0.5 come out at 0.38), before the room.
    SoftClip,
}

impl Room {
    fn name(self) -> &'static str {
        match self {
            Room::Linear => "linear",
            Room::SoftClip => "soft-clipping speaker",
        }
    }

    /// What the speaker sends into the room of what was played.
    fn speaker(self, played: &[f32]) -> Vec<f32> {
        match self {
            Room::Linear => played.to_vec(),
            Room::SoftClip => played.iter().map(|&s| (2.0 * s).tanh() / 2.0).collect(),
        }
    }
}

/// When the phrase is said (ms into the reply), the delay (ms), the echo's gain, and how
/// far below the echo the phrase is (dB).
type Case = (usize, usize, f32, f32);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        println!("echo benchmark: run it with `cargo bench --bench echo`");
        return;
    }
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--configs")
        .and_then(|i| args.get(i + 1))
        .map(|list| list.split(',').map(str::to_lowercase).collect());
    let quick = args.iter().any(|a| a == "--quick");

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/stt-test");
    let reply: Vec<f32> = (1..=6)
        .flat_map(|n| sentence(&root.join(format!("wav/en-us-{n:02}.wav"))))
        .collect();
    let mut replies: Vec<PathBuf> = std::fs::read_dir(root.join("wav"))
        .expect("target/stt-test/wav (run tests/setup.sh)")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "wav"))
        .collect();
    replies.sort();
    let all_replies: Vec<f32> = replies.iter().flat_map(|p| sentence(p)).collect();
    let mut phrases: Vec<PathBuf> = std::fs::read_dir(root.join("wake/phrase"))
        .expect("target/stt-test/wake/phrase (run tests/setup.sh)")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "wav"))
        .collect();
    phrases.sort();
    let persons: Vec<Vec<f32>> = phrases.iter().map(|p| read(p)).collect();
    // Both bundled words: the residual echo is speech-like, which the neural word was
    // trained to ignore (babble) and the reference word was not.
    let neural = || WakeWord::bundled_neural().expect("the bundled neural word");
    let at = |sensitivity| Settings {
        sensitivity,
        ..Settings::default()
    };
    // The last is the default word not told when the canceller takes played sound out:
    // what that rule gains.
    let words = [
        (
            "reference",
            WakeWord::bundled_reference().expect("the bundled reference word"),
            Settings::default(),
            true,
        ),
        ("neural `medium`", neural(), at(Sensitivity::Medium), true),
        ("neural `high`", neural(), at(Sensitivity::High), true),
        (
            "neural `medium` without the over-echo rule",
            neural(),
            at(Sensitivity::Medium),
            false,
        ),
    ];
    let configs: Vec<Config> = configs()
        .into_iter()
        .filter(|c| match &only {
            Some(only) => only
                .iter()
                .any(|word| c.name.to_lowercase().contains(word.as_str())),
            None => c.extras == Extras::default(),
        })
        .collect();

    let found_columns: String = words
        .iter()
        .enumerate()
        .map(|(i, (name, ..))| {
            let what = if i == 0 {
                "phrases found during the reply, "
            } else {
                ""
            };
            format!(" {what}{name} off / on |")
        })
        .collect();
    println!(
        "| room | phrase said | delay | echo gain | phrase below the echo | canceller | ERLE dB (median of {}) | delay found (ms, median) |{found_columns} CPU per 10 ms block |",
        phrases.len()
    );
    println!("|{}", " --- |".repeat(9 + words.len()));
    let cases: &[Case] = if quick {
        &[(2_500, 80, 0.6, 10.0), (8_000, 80, 0.6, 10.0)]
    } else {
        &[
            (2_500, 30, 0.6, 10.0),
            (2_500, 80, 0.6, 10.0),
            (2_500, 150, 0.6, 10.0),
            (8_000, 30, 0.6, 10.0),
            (8_000, 80, 0.6, 10.0),
            (8_000, 150, 0.6, 10.0),
            (8_000, 80, 0.3, 10.0),
            (8_000, 80, 0.6, 15.0),
        ]
    };
    // Per room, canceller and word: phrases found, phrases said.
    let mut totals = vec![vec![vec![[0usize; 2]; words.len()]; configs.len()]; 2];
    for (room, totals) in [Room::Linear, Room::SoftClip].into_iter().zip(&mut totals) {
        for &case in cases {
            let scenes: Vec<Scene> = persons
                .iter()
                .enumerate()
                .map(|(n, person)| Scene::new(room, &reply, person, case, n as u64))
                .collect();
            let off: Vec<usize> = words
                .iter()
                .map(|(_, word, settings, _)| {
                    scenes
                        .iter()
                        .filter(|scene| scene.found(word, settings, &scene.mic, &[]))
                        .count()
                })
                .collect();
            for (config, total) in configs.iter().zip(totals.iter_mut()) {
                let mut found = vec![0usize; words.len()];
                let mut erle = Vec::new();
                let mut delays = Vec::new();
                let mut cpu = Duration::ZERO;
                let mut blocks = 0u32;
                for scene in &scenes {
                    let (cancelled, stats) = scene.cancel(config);
                    cpu += cancelled.took;
                    blocks += (scene.mic.len() / (SR / 100)) as u32;
                    delays.push(stats.delay_ms.unwrap_or(0));
                    erle.push(scene.erle(&cancelled.out));
                    for ((_, word, settings, told), found) in words.iter().zip(&mut found) {
                        let over_echo: &[bool] = if *told { &cancelled.over_echo } else { &[] };
                        if scene.found(word, settings, &cancelled.out, over_echo) {
                            *found += 1;
                        }
                    }
                }
                for (total, found) in total.iter_mut().zip(&found) {
                    total[0] += found;
                    total[1] += scenes.len();
                }
                erle.sort_by(f64::total_cmp);
                delays.sort();
                let (at_ms, delay_ms, gain, below) = case;
                let n = scenes.len();
                let found_cells: String = off
                    .iter()
                    .zip(&found)
                    .map(|(off, on)| format!(" {off}/{n} / {on}/{n} |"))
                    .collect();
                println!(
                    "| {} | {:.1} s in | {delay_ms} ms | {:.0} dB | {below:.0} dB | {} | {:.1} | {} |{found_cells} {:.0} µs |",
                    room.name(),
                    at_ms as f64 / 1000.0,
                    20.0 * f64::from(gain).log10(),
                    config.name,
                    erle[erle.len() / 2],
                    delays[delays.len() / 2],
                    cpu.as_secs_f64() * 1e6 / f64::from(blocks),
                );
            }
        }
    }

    println!();
    let names: Vec<&str> = words.iter().map(|(name, ..)| *name).collect();
    println!(
        "| room | canceller | phrases found during replies, all cases: {} | wakes in {} replies alone, off: {} | on: {} | ERLE dB over them |",
        names.join(" | "),
        replies.len(),
        names.join(", "),
        names.join(", "),
    );
    println!("|{}", " --- |".repeat(5 + words.len()));
    for (room, totals) in [Room::Linear, Room::SoftClip].into_iter().zip(&totals) {
        let quiet = Scene::new(room, &all_replies, &[], (0, 80, 0.6, 10.0), 99);
        let off: Vec<usize> = words
            .iter()
            .map(|(_, word, settings, _)| detect(word, settings, &quiet.mic, &[]).len())
            .collect();
        let list = |counts: &[usize]| {
            counts
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        for (config, total) in configs.iter().zip(totals) {
            let (cancelled, _) = quiet.cancel(config);
            let on: Vec<usize> = words
                .iter()
                .map(|(_, word, settings, told)| {
                    let over_echo: &[bool] = if *told { &cancelled.over_echo } else { &[] };
                    detect(word, settings, &cancelled.out, over_echo).len()
                })
                .collect();
            let found: String = total
                .iter()
                .map(|[found, said]| format!(" {found}/{said} |"))
                .collect();
            println!(
                "| {} | {} |{found} {} | {} | {:.1} |",
                room.name(),
                config.name,
                list(&off),
                list(&on),
                quiet.erle(&cancelled.out),
            );
        }
    }
}

/// Every canceller the benchmark knows.
fn configs() -> Vec<Config> {
    let none = Extras::default();
    let default = EchoCanceller3Config::default;
    vec![
        Config {
            name: "daemon's (tuned AEC3)",
            engine: Engine::Aec3 {
                config: Box::new(echo::barge_in_config()),
                linear: false,
            },
            extras: none,
        },
        Config {
            name: "sonora AudioProcessing (AEC3 default)",
            engine: Engine::Sonora,
            extras: none,
        },
        Config {
            name: "AEC3 linear filter output, daemon's configuration",
            engine: Engine::Aec3 {
                config: Box::new(echo::barge_in_config()),
                linear: true,
            },
            extras: none,
        },
        Config {
            name: "AEC3 linear filter output, default configuration",
            engine: Engine::Aec3 {
                config: Box::new(default()),
                linear: true,
            },
            extras: none,
        },
        #[cfg(feature = "webrtc-aec")]
        Config {
            name: "WebRTC C++ (AEC3 default)",
            engine: Engine::WebRtc,
            extras: none,
        },
        Config {
            name: "sonora AudioProcessing + NS",
            engine: Engine::Sonora,
            extras: Extras {
                noise_suppression: true,
                gain_control: false,
            },
        },
        Config {
            name: "sonora AudioProcessing + NS + AGC2",
            engine: Engine::Sonora,
            extras: Extras {
                noise_suppression: true,
                gain_control: true,
            },
        },
    ]
}

/// A sentence and 200 ms of silence after it.
fn sentence(path: &Path) -> Vec<f32> {
    let mut s = read(path);
    s.extend(vec![0.0; SR / 5]);
    s
}

fn read(path: &Path) -> Vec<f32> {
    read_wav_16k(path)
        .unwrap_or_else(|e| panic!("{}: {e} (run tests/setup.sh)", path.display()))
        .0
}

/// Where the wake word fired, as sample positions; `over_echo` says per frame whether the
/// canceller was taking played sound out (none: never), as the daemon tells the word.
fn detect(word: &WakeWord, settings: &Settings, audio: &[f32], over_echo: &[bool]) -> Vec<usize> {
    let mut detector = Detector::with_word(settings, word).expect("detector");
    let mut ends = Vec::new();
    for (i, chunk) in audio.chunks(FRAME_SAMPLES).enumerate() {
        detector.set_over_echo(over_echo.get(i).copied().unwrap_or(false));
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
        room: Room,
        reply: &[f32],
        person: &[f32],
        (at_ms, delay_ms, gain, below_db): Case,
        seed: u64,
    ) -> Scene {
        let mut render = vec![0.0f32; SR];
        render.extend(reply);
        let reply_end = render.len();
        render.resize((reply_end + SR) / FRAME_SAMPLES * FRAME_SAMPLES, 0.0);
        let len = render.len();
        let mut mic = echo_of(&room.speaker(&render), delay_ms, gain, len);
        // The person `below_db` below the echo's level, `at_ms` into the reply.
        let person_at = SR + at_ms * SR / 1000;
        let scale = if person.is_empty() {
            0.0
        } else {
            let echo_rms = rms(&mic[SR..reply_end]);
            echo_rms / rms(person).max(1e-6) * 10f32.powf(-below_db / 20.0)
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

    /// Whether `word` fired on `audio` during the person's phrase (or just after it).
    fn found(
        &self,
        word: &WakeWord,
        settings: &Settings,
        audio: &[f32],
        over_echo: &[bool],
    ) -> bool {
        detect(word, settings, audio, over_echo)
            .iter()
            .any(|&end| end > self.person_at && end < self.person_at + self.person_len + SR / 2)
    }

    /// Runs the microphone through a fresh canceller with the render played alongside.
    fn cancel(&self, config: &Config) -> (Cancelled, echo::EchoStats) {
        let (reference, mut canceller) =
            echo::pair_with(config.engine.clone(), config.extras).expect("canceller");
        let cancelled = play_and_cancel(&reference, &mut canceller, &self.render, &self.mic, 0);
        (cancelled, canceller.stats())
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
