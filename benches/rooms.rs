//! Noise through the whole hearing chain (issue 26): held-out voices say "hey strawberry,
//! <command>" in rooms, and the daemon's chain hears them in-process, frame by frame as its
//! audio thread does: the capture-side processing, the `Listener` (wake word, end of
//! speech with the pause judged by its transcript, as the conversation task does), then
//! Whisper on the command the listener cut.
//!
//! Voices and commands: `benches/stt_voices.sh wake` (flite awb/rms/slt/kal16, festival
//! ked/kal, the 16 commands of benches/stt/commands.txt) for the wake path;
//! `benches/stt_voices.sh` (the commands alone) for the same commands with the wake word
//! bypassed (`Listener::listen`, as a follow-up window), so the wake word's effect and
//! the rest of the chain's separate. Each clip gets [`LEAD_MS`] of the room before it
//! and [`TAIL_MS`] after; the true end of its last word is the last 20 ms frame of the
//! clean clip within 40 dB of its loudest.
//!
//! Rooms: `benches/stt/rooms.rs` (sox), the background running through the lead and the
//! tail too. Processing: `off` (the microphone as heard); `daemon` (the echo canceller
//! stage as `run` has it with a speaker: sonora's AEC3, `EchoStage`, no extras, nothing
//! played); `ns` and `agc` (sonora's AEC3 with its noise suppression, or with its AGC2
//! adaptive digital gain, silence as the reference and the output used from the first
//! frame: what such a switch on the capture path would do; no such switch exists in the
//! daemon, see BENCHMARKS.md).
//!
//! The chain is the default configuration's: the default wake word (the bundled neural
//! word at `medium`; the reference word at its default is counted too, wake only), the VAD's defaults
//! (`vad.mid_sentence_ms` 1200: pauses are transcribed and judged at once, so the
//! judged end here has no transcription latency), the recommended model (base q8_0,
//! `auto` among en/de/fr/es, 2 threads), with `stt.timeout_ms` raised so that the load of
//! a shared machine cannot cut a transcription.
//!
//! `cargo bench --bench rooms` (after `tests/setup.sh`; needs flite, festival, sox).
//! `ROOMS_BENCH_ROOMS` (comma-separated names of [`rooms::ROOMS`], default all) and
//! `ROOMS_BENCH_PROCESSING` (`off,daemon,ns,agc`, default all) choose; `ROOMS_BENCH_RESUME`
//! (a directory) keeps each room's results there and reuses them; `ROOMS_BENCH_STRIDE=k`
//! takes every k-th clip (all six voices stay in). Under `cargo test`
//! this target only checks its inputs.

#[path = "../tests/support/mod.rs"]
#[allow(dead_code, reason = "a benchmark uses a few of the test helpers")]
mod support;

#[path = "stt/rooms.rs"]
mod rooms;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sonora::config::{
    AdaptiveDigital, EchoCanceller, GainController2, HighPassFilter, NoiseSuppression,
};
use sonora::{AudioProcessing, StreamConfig};
use strawberry_spoke::app::Parts;
use strawberry_spoke::audio::wav::frames;
use strawberry_spoke::audio::{Frame, SAMPLE_RATE, ms_to_samples};
use strawberry_spoke::config::Config;
use strawberry_spoke::daemon::echo::EchoStage;
use strawberry_spoke::daemon::listener::{Guess, Heard};
use strawberry_spoke::daemon::pipeline::clean_transcript;
use strawberry_spoke::daemon::systemd::Notifier;
use strawberry_spoke::daemon::turn_end::sounds_finished;
use strawberry_spoke::stt::Transcriber;
use strawberry_spoke::wake::{Bundled, WakeWord};
use support::stt::{Clip, base_model, cache_dir, clips_in, word_error_rate};

/// Room before each clip: the listener's floors and the detector settle on it.
const LEAD_MS: u64 = 1_500;
/// Room after each clip: enough for a command that never falls silent to reach
/// `vad.max_utterance_ms` (15 s) and be cut there, as the daemon would cut it.
const TAIL_MS: u64 = 15_000;
/// Where the wake-bypassed command's window opens (within the lead).
const LISTEN_AT_MS: u64 = 1_000;
/// The floor: end of speech judged within this of the last word.
const WITHIN_S: f64 = 1.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Processing {
    Off,
    Daemon,
    Ns,
    Agc,
}

impl Processing {
    fn name(self) -> &'static str {
        match self {
            Processing::Off => "off",
            Processing::Daemon => "daemon",
            Processing::Ns => "ns",
            Processing::Agc => "agc",
        }
    }
}

/// What the chain made of one clip.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Outcome {
    /// The wake word was heard (always true with the wake word bypassed).
    woke: bool,
    /// The end of the command the listener judged, and where it decided, seconds after
    /// the true end of the last word; `None`: no command came (no speech, or not woken).
    end_after_s: Option<f64>,
    decided_after_s: Option<f64>,
    /// Cut at the maximum length.
    cut: bool,
    /// The command's transcript, cleaned as the pipeline cleans it.
    text: Option<String>,
    /// Transcriptions of pauses along the way.
    pauses: usize,
}

/// One room and processing, every clip.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct RoomRun {
    wake: Vec<Outcome>,
    /// The reference word heard the phrase (wake only).
    reference_word: Vec<bool>,
    bypassed: Vec<Outcome>,
    /// The processed audio was the microphone's, bit for bit, in every clip.
    unchanged: bool,
    seconds: f64,
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        let commands = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/stt/commands.txt"),
        )
        .expect("benches/stt/commands.txt");
        assert_eq!(
            commands.lines().filter(|l| !l.trim().is_empty()).count(),
            16
        );
        assert!(
            cache_dir().join("base-ct2/model.bin").is_file(),
            "run tests/setup.sh first"
        );
        assert!(!clips_in(&cache_dir().join("wav")).is_empty());
        WakeWord::bundled_reference().expect("the bundled reference word");
        WakeWord::bundled_neural().expect("the bundled neural word");
        for room in rooms::ROOMS {
            assert!(room == "quiet" || room == "reverberant" || rooms::below_db(room) > 0.0);
        }
        println!("rooms benchmark: run it with `cargo bench --bench rooms`");
        return;
    }
    // Every `stride`-th clip: the clips are in voice order, so all voices stay in.
    let stride = std::env::var("ROOMS_BENCH_STRIDE")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|s| *s > 0)
        .unwrap_or(1);
    let every = |clips: Vec<Clip>| -> Vec<Clip> { clips.into_iter().step_by(stride).collect() };
    let wake_clips = every(rooms::held_out(true));
    let command_clips = every(rooms::held_out(false));
    assert_eq!(wake_clips.len(), command_clips.len());
    let chosen = |var: &str, all: &[&'static str]| -> Vec<&'static str> {
        match std::env::var(var) {
            Ok(list) if !list.is_empty() => all
                .iter()
                .copied()
                .filter(|r| list.split(',').any(|w| w == *r))
                .collect(),
            _ => all.to_vec(),
        }
    };
    let room_names = chosen("ROOMS_BENCH_ROOMS", &rooms::ROOMS);
    let processings: Vec<Processing> =
        chosen("ROOMS_BENCH_PROCESSING", &["off", "daemon", "ns", "agc"])
            .into_iter()
            .map(|p| match p {
                "off" => Processing::Off,
                "daemon" => Processing::Daemon,
                "ns" => Processing::Ns,
                _ => Processing::Agc,
            })
            .collect();
    let resume = std::env::var_os("ROOMS_BENCH_RESUME").map(PathBuf::from);

    let mut config = Config::default();
    config.stt.model = base_model("q8_0");
    config.stt.threads = 2;
    config.stt.language = "auto".into();
    // The machine the figures come from is shared: at a load of 10 on its 2 cores one
    // base transcription took over the default 10 s and came back empty. Load must not
    // change the words, so no transcription is cut here.
    config.stt.timeout_ms = 600_000;
    let parts = Parts::new(&config).unwrap_or_else(|e| panic!("{e}"));
    let mut reference = config.clone();
    reference.wake.bundled = Bundled::Reference;
    let reference = Parts::new(&reference).unwrap_or_else(|e| panic!("{e}"));
    let transcriber = Transcriber::load(&config.stt.settings()).unwrap_or_else(|e| panic!("{e}"));
    let chain = Chain {
        parts: &parts,
        reference: &reference,
        transcriber: &transcriber,
    };
    println!(
        "\nnoise through the whole chain: {} clips (6 voices, every {stride}th of their 16 commands) per room; base q8_0, auto among {:?}, 2 threads",
        wake_clips.len(),
        config.stt.languages
    );

    let mut table: Vec<(String, Processing, RoomRun)> = Vec::new();
    for room in room_names {
        let wake_audio = in_room(&wake_clips, room, 0);
        let command_audio = in_room(&command_clips, room, 1_000);
        let mut off: Option<RoomRun> = None;
        for &processing in &processings {
            let saved = resume
                .as_ref()
                .map(|dir| dir.join(format!("{room}-{}.json", processing.name())));
            let run = match saved
                .as_ref()
                .and_then(|p| std::fs::read(p).ok())
                .and_then(|b| serde_json::from_slice::<RoomRun>(&b).ok())
            {
                Some(run) => run,
                None => {
                    let run = chain.room(processing, &wake_audio, &command_audio, off.as_ref());
                    if let Some(path) = &saved {
                        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                        std::fs::write(path, serde_json::to_vec(&run).unwrap()).unwrap();
                    }
                    run
                }
            };
            eprintln!("{room} {}: {:.0} s", processing.name(), run.seconds);
            if processing == Processing::Off {
                off = Some(run.clone());
            }
            table.push((room.to_string(), processing, run));
        }
    }
    report(&table, &wake_clips, &command_clips);
}

/// A clip in a room: its samples with the lead and tail, where its last word ends.
struct Heard16 {
    samples: Vec<f32>,
    true_end: u64,
}

/// Every clip of `clips` with [`LEAD_MS`] before and [`TAIL_MS`] after, in `room` (the
/// background's stretch for clip `n` starts from `n + seed`).
fn in_room(clips: &[Clip], room: &str, seed: usize) -> Vec<Heard16> {
    let dir = cache_dir().join("bench-rooms").join(room);
    let background = rooms::background(room, &dir);
    let lead = ms_to_samples(LEAD_MS);
    clips
        .iter()
        .enumerate()
        .map(|(n, clip)| {
            let clean = rooms::read(&clip.wav);
            let mut padded = vec![0.0; lead];
            padded.extend_from_slice(&clean);
            padded.extend(std::iter::repeat_n(0.0, ms_to_samples(TAIL_MS)));
            let samples = match (&background, room) {
                (Some(background), _) => rooms::mix(
                    &padded,
                    rooms::rms(&clean),
                    background,
                    n + seed,
                    rooms::below_db(room),
                ),
                (None, "reverberant") => {
                    let dry = tempfile::Builder::new().suffix(".wav").tempfile().unwrap();
                    let wet = tempfile::Builder::new().suffix(".wav").tempfile().unwrap();
                    rooms::write(dry.path(), &padded);
                    rooms::reverb(dry.path(), wet.path());
                    rooms::read(wet.path())
                }
                (None, _) => padded,
            };
            Heard16 {
                samples,
                true_end: (lead + last_word_end(&clean)) as u64,
            }
        })
        .collect()
}

/// Just past the last 20 ms frame within 40 dB of the loudest.
fn last_word_end(clean: &[f32]) -> usize {
    let levels: Vec<f32> = clean
        .chunks(320)
        .map(|f| (f.iter().map(|s| s * s).sum::<f32>() / f.len() as f32).sqrt())
        .collect();
    let loudest = levels.iter().copied().fold(0.0, f32::max);
    levels
        .iter()
        .rposition(|l| *l >= loudest * 0.01)
        .map_or(0, |i| ((i + 1) * 320).min(clean.len()))
}

/// The capture-side processing, frame by frame.
enum Stage {
    Off,
    /// The daemon's stage (nothing is played: its reference is dropped).
    Daemon(Box<EchoStage>),
    /// Sonora's AudioProcessing: AEC3 with noise suppression or AGC2.
    Apm(Box<AudioProcessing>),
}

impl Stage {
    fn new(processing: Processing) -> Stage {
        match processing {
            Processing::Off => Stage::Off,
            Processing::Daemon => {
                let (_, canceller) =
                    strawberry_spoke::audio::echo::pair().unwrap_or_else(|e| panic!("{e}"));
                Stage::Daemon(Box::new(EchoStage::new(
                    canceller,
                    Arc::new(Notifier::from_env()),
                )))
            }
            Processing::Ns | Processing::Agc => {
                // The canceller's configuration with noise suppression or AGC2
                // (src/audio/echo.rs `Extras`), its output used from the start.
                let ns = processing == Processing::Ns;
                let stream = StreamConfig::new(SAMPLE_RATE, 1);
                Stage::Apm(Box::new(
                    AudioProcessing::builder()
                        .config(sonora::Config {
                            echo_canceller: Some(EchoCanceller::default()),
                            high_pass_filter: Some(HighPassFilter::default()),
                            noise_suppression: ns.then(NoiseSuppression::default),
                            gain_controller2: (!ns).then(|| GainController2 {
                                adaptive_digital: Some(AdaptiveDigital::default()),
                                ..GainController2::default()
                            }),
                            ..sonora::Config::default()
                        })
                        .capture_config(stream)
                        .render_config(stream)
                        .build(),
                ))
            }
        }
    }

    fn process(&mut self, frame: &mut Frame) {
        match self {
            Stage::Off => {}
            Stage::Daemon(stage) => stage.process(frame),
            Stage::Apm(apm) => {
                for block in frame.samples.chunks_exact_mut(160) {
                    let silence = [0.0f32; 160];
                    let mut played = [0.0f32; 160];
                    apm.process_render_f32(&[&silence[..]], &mut [&mut played[..]])
                        .expect("render block");
                    let heard = block.to_vec();
                    apm.process_capture_f32(&[&heard[..]], &mut [block])
                        .expect("capture block");
                }
            }
        }
    }

    /// `samples` processed frame by frame, as the audio thread does.
    fn run(processing: Processing, samples: &[f32]) -> Vec<f32> {
        let mut stage = Stage::new(processing);
        let mut out = Vec::with_capacity(samples.len());
        for mut frame in frames(samples, 0) {
            stage.process(&mut frame);
            out.extend_from_slice(&frame.samples);
        }
        out
    }
}

struct Chain<'a> {
    parts: &'a Parts,
    reference: &'a Parts,
    transcriber: &'a Transcriber,
}

impl Chain<'_> {
    /// Every clip of a room with `processing`; where the processed audio is the
    /// microphone's bit for bit, `off`'s outcome is that clip's.
    fn room(
        &self,
        processing: Processing,
        wake: &[Heard16],
        commands: &[Heard16],
        off: Option<&RoomRun>,
    ) -> RoomRun {
        let started = Instant::now();
        let mut run = RoomRun {
            unchanged: true,
            ..RoomRun::default()
        };
        for (i, (w, c)) in wake.iter().zip(commands).enumerate() {
            let w_audio = Stage::run(processing, &w.samples);
            let c_audio = Stage::run(processing, &c.samples);
            let same = w_audio == w.samples && c_audio == c.samples;
            run.unchanged &= same;
            if let (true, Some(off)) = (same, off) {
                run.wake.push(off.wake[i].clone());
                run.reference_word.push(off.reference_word[i]);
                run.bypassed.push(off.bypassed[i].clone());
                continue;
            }
            run.wake
                .push(self.hear(self.parts, &w_audio, w.true_end, Mode::Wake));
            run.reference_word.push(
                self.hear(self.reference, &w_audio, w.true_end, Mode::WakeOnly)
                    .woke,
            );
            run.bypassed
                .push(self.hear(self.parts, &c_audio, c.true_end, Mode::Bypass));
        }
        run.seconds = started.elapsed().as_secs_f64();
        run
    }

    /// `audio` through the listener of `parts`, pauses judged by their transcript as
    /// the conversation task judges them, the command transcribed as the pipeline does.
    fn hear(&self, parts: &Parts, audio: &[f32], true_end: u64, mode: Mode) -> Outcome {
        let (_, detector) = parts.wake_word().unwrap_or_else(|e| panic!("{e}"));
        let mut listener = parts.listener(detector).unwrap_or_else(|e| panic!("{e}"));
        let mut guess = Guess::default();
        let mut outcome = Outcome {
            woke: mode == Mode::Bypass,
            ..Outcome::default()
        };
        let listen_at = ms_to_samples(LISTEN_AT_MS) as u64;
        let after = |at: u64| (at as f64 - true_end as f64) / f64::from(SAMPLE_RATE);
        for frame in frames(audio, 0) {
            if mode == Mode::Bypass && frame.start == listen_at {
                listener.listen(parts.config().vad.no_speech_timeout_ms);
            }
            let mut heard = listener.push(&frame).map(|h| guess.attach(h));
            if heard.is_none()
                && let Some(paused) = listener.take_pause()
            {
                outcome.pauses += 1;
                let end = paused.end;
                let transcript = self
                    .transcriber
                    .transcribe(&paused.samples)
                    .unwrap_or_else(|e| panic!("{e}"));
                let text = clean_transcript(&transcript.text);
                let finished = sounds_finished(&text, transcript.last_word_probability);
                guess.keep(end, transcript);
                if finished {
                    heard = listener.finish(end).map(|h| guess.attach(h));
                }
            }
            match heard {
                Some(Heard::Woke(_)) => {
                    outcome.woke = true;
                    if mode == Mode::WakeOnly {
                        return outcome;
                    }
                }
                Some(Heard::Command(command)) => {
                    outcome.end_after_s = Some(after(command.end));
                    outcome.decided_after_s = Some(after(command.decided_at));
                    outcome.cut = command.cut;
                    let transcript = match command.transcript {
                        Some(transcript) => transcript,
                        None => self
                            .transcriber
                            .transcribe(&command.samples)
                            .unwrap_or_else(|e| panic!("{e}")),
                    };
                    outcome.text = Some(clean_transcript(&transcript.text));
                    return outcome;
                }
                Some(Heard::NoSpeech { .. }) => return outcome,
                Some(Heard::Speaking { .. } | Heard::Stop) | None => {}
            }
        }
        outcome
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Wake word, then the command.
    Wake,
    /// Only whether the wake word is heard.
    WakeOnly,
    /// The command in a window opened without the wake word.
    Bypass,
}

fn median_max_within(values: &[f64]) -> String {
    if values.is_empty() {
        return "-".into();
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let within = v.iter().filter(|x| x.abs() <= WITHIN_S).count();
    format!(
        "{:+.2} / {:+.2} s, {within} of {}",
        v[v.len() / 2],
        v[v.len() - 1],
        v.len()
    )
}

/// WER of the outcomes that have a command (a missing transcript of a woken command
/// counts as nothing heard), and how many that was.
fn wer(outcomes: &[Outcome], clips: &[Clip]) -> (f64, usize) {
    let pairs: Vec<(&str, &str)> = clips
        .iter()
        .zip(outcomes)
        .filter(|(_, o)| o.woke)
        .map(|(c, o)| (c.text.as_str(), o.text.as_deref().unwrap_or("")))
        .collect();
    (word_error_rate(pairs.iter().copied()), pairs.len())
}

fn report(table: &[(String, Processing, RoomRun)], wake_clips: &[Clip], command_clips: &[Clip]) {
    let n = wake_clips.len();
    println!(
        "\n| room | processing | wake found (default: neural, `medium`) | reference word | end judged after the last word: median / max, within 1 s (woken) | decided: median / max, within 1 s | WER of woken commands | wake bypassed: WER | decided: median / max, within 1 s | pauses transcribed |"
    );
    println!("|{}", " --- |".repeat(10));
    for (room, processing, run) in table {
        let woke = run.wake.iter().filter(|o| o.woke).count();
        let reference = run.reference_word.iter().filter(|w| **w).count();
        let ends: Vec<f64> = run.wake.iter().filter_map(|o| o.end_after_s).collect();
        let decided: Vec<f64> = run.wake.iter().filter_map(|o| o.decided_after_s).collect();
        let (wake_wer, _) = wer(&run.wake, command_clips);
        let (bypass_wer, _) = wer(&run.bypassed, command_clips);
        let bypass_decided: Vec<f64> = run
            .bypassed
            .iter()
            .filter_map(|o| o.decided_after_s)
            .collect();
        let pauses: usize = run.wake.iter().chain(&run.bypassed).map(|o| o.pauses).sum();
        let cut = run
            .wake
            .iter()
            .chain(&run.bypassed)
            .filter(|o| o.cut)
            .count();
        println!(
            "| {room} | {}{} | {woke} of {n} | {reference} of {n} | {} | {} | {:.1}% | {:.1}% | {} | {pauses}{} |",
            processing.name(),
            if run.unchanged && *processing != Processing::Off {
                " (audio unchanged)"
            } else {
                ""
            },
            median_max_within(&ends),
            median_max_within(&decided),
            wake_wer * 100.0,
            bypass_wer * 100.0,
            median_max_within(&bypass_decided),
            if cut > 0 {
                format!(", {cut} cut at the length limit")
            } else {
                String::new()
            }
        );
    }
    println!();
    for (room, processing, run) in table {
        let no_command = run
            .wake
            .iter()
            .filter(|o| o.woke && o.text.is_none())
            .count()
            + run.bypassed.iter().filter(|o| o.text.is_none()).count();
        if no_command > 0 {
            println!(
                "{room} {}: {no_command} commands (woken or bypassed) never cut (no speech found, or the clip ended first)",
                processing.name()
            );
        }
    }
    let quiet = |processing: Processing| {
        table
            .iter()
            .find(|(r, p, _)| r == "quiet" && *p == processing)
            .map(|(_, _, run)| run)
    };
    for (room, processing, run) in table {
        if room != "noise-10db" {
            continue;
        }
        let Some(q) = quiet(*processing) else {
            continue;
        };
        let (noisy, _) = wer(&run.bypassed, command_clips);
        let (calm, _) = wer(&q.bypassed, command_clips);
        let (noisy_w, _) = wer(&run.wake, command_clips);
        let (calm_w, _) = wer(&q.wake, command_clips);
        let ratio = |noisy: f64, calm: f64| {
            if calm > 0.0 {
                format!("{:.2}x", noisy / calm)
            } else {
                format!("{:.1}% against 0%", noisy * 100.0)
            }
        };
        println!(
            "floor, steady noise 10 dB, {}: WER {} the quiet room's with the wake word bypassed, {} of woken commands (at most 1.5x asked)",
            processing.name(),
            ratio(noisy, calm),
            ratio(noisy_w, calm_w)
        );
    }
    for (room, processing, run) in table {
        for (i, (clip, o)) in command_clips.iter().zip(&run.bypassed).enumerate() {
            let w = &run.wake[i];
            let bad = |o: &Outcome| {
                o.woke
                    && (o.text.is_none()
                        || word_error_rate([(clip.text.as_str(), o.text.as_deref().unwrap_or(""))])
                            > 0.3
                        || o.decided_after_s.is_none_or(|d| d.abs() > WITHIN_S))
            };
            if bad(o) || bad(w) {
                println!(
                    "  {room} {} {}: said {:?}; woken: {} {:?} decided {:?}; bypassed: {:?} decided {:?}",
                    processing.name(),
                    clip.wav.file_name().unwrap_or_default().to_string_lossy(),
                    clip.text,
                    w.woke,
                    w.text,
                    w.decided_after_s.map(|d| (d * 100.0).round() / 100.0),
                    o.text,
                    o.decided_after_s.map(|d| (d * 100.0).round() / 100.0),
                );
            }
        }
    }
}
