//! `wakeword train` and `wakeword test`: making a wake word and seeing how it scores.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

use super::{print_out, thread_cpu};
use crate::config::Config;
use crate::stt::audio;
use crate::wake::{Detection, Detector, SAMPLE_RATE, Settings, WakeWord, train as wake_train};

/// Audio is fed in chunks of this many samples (100 ms), as a sound card would.
const CHUNK: usize = SAMPLE_RATE as usize / 10;

/// Silence fed after a recording: the detector waits a moment after the best match
/// before it decides, so a phrase at the very end needs this to be reported.
const TAIL_SECONDS: usize = 1;

/// Takes of the phrase kept after it was cut out of the microphone audio, on each side.
const TAKE_MARGIN_MS: u64 = 150;

pub(super) fn train(
    config: &Config,
    name: &str,
    out: &Path,
    samples: &[PathBuf],
    record: Option<usize>,
) -> Result<ExitCode> {
    let name = name.trim();
    if name.is_empty() {
        eprintln!(
            "error: --name must not be empty: give the phrase, e.g. --name \"hey strawberry\""
        );
        return Ok(ExitCode::from(2));
    }
    let mut samples = samples.to_vec();
    if let Some(takes) = record {
        let dir = takes_dir(out);
        match record_takes(config, name, takes, &dir) {
            Ok(recorded) => samples.extend(recorded),
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::from(2));
            }
        }
    }
    let (word, report) = match wake_train::train(name, &samples) {
        Ok(done) => done,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if let Err(e) = word.save(out) {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(2));
    }
    let mut text = format!(
        "wrote {}: {:?} from {} recordings\n",
        out.display(),
        word.name(),
        word.recordings()
    );
    for t in &report {
        text.push_str(&format!(
            "  {}  {:.2} s, {:.2} s of speech kept, loudest {:.0} dBFS\n",
            t.path.display(),
            t.seconds,
            t.speech_seconds,
            t.peak_dbfs
        ));
    }
    text.push_str(&format!(
        "try it: strawberry-spoke wakeword test {} RECORDING.wav\n",
        out.display()
    ));
    print_out(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Where recorded takes are kept (beside the wake word file, so they can be reused
/// to train again): `OUT.takes/`.
fn takes_dir(out: &Path) -> PathBuf {
    let mut dir = out.as_os_str().to_owned();
    dir.push(".takes");
    PathBuf::from(dir)
}

/// Records `takes` utterances of `name` from the configured microphone, prompting on
/// stderr, each cut out by the end-of-speech detector and written as a 16 kHz WAV in
/// `dir`. A take with no speech is asked again (up to three times).
fn record_takes(config: &Config, name: &str, takes: usize, dir: &Path) -> Result<Vec<PathBuf>> {
    use crate::audio::{Capture, CaptureStatus, ms_to_samples, wav::write_wav};
    use crate::vad::{Endpoint, Endpointer, VadSettings};
    use anyhow::{Context, bail};
    use std::time::{Duration, Instant};

    if !(1..=50).contains(&takes) {
        bail!("--record takes 1 to 50 recordings, not {takes}");
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let capture = Capture::start(config.audio.capture_settings())?;
    let opened = Instant::now();
    loop {
        match capture.status() {
            CaptureStatus::Running { device, format, .. } => {
                eprintln!("recording from {device} ({format})");
                break;
            }
            CaptureStatus::Retrying { error, .. } if opened.elapsed() > Duration::from_secs(3) => {
                bail!("{error}")
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    // Nobody transcribes the takes: silence alone ends them.
    let vad = VadSettings {
        max_utterance_ms: 4_000,
        no_speech_timeout_ms: 8_000,
        mid_sentence_ms: 0,
        ..config.vad.settings()
    };
    let frames = capture.frames();
    let next = || {
        frames
            .recv_timeout(Duration::from_secs(5))
            .context("the microphone stopped delivering audio")
    };
    let mut recorded = Vec::new();
    let mut misses = 0;
    while recorded.len() < takes {
        // A moment of the room first, so the detector knows its noise floor.
        let mut endpointer = Endpointer::new(&vad);
        let mut audio = Vec::new();
        while audio.len() < ms_to_samples(300) {
            let frame = next()?;
            endpointer.push(&frame.samples);
            audio.extend(frame.samples);
        }
        eprintln!("({}/{takes}) say \"{name}\" now", recorded.len() + 1);
        let endpoint = loop {
            let frame = next()?;
            audio.extend_from_slice(&frame.samples);
            if let Some(end) = endpointer.push(&frame.samples) {
                break end;
            }
        };
        let (start, end) = match endpoint {
            Endpoint::Speech { start, end, .. } => (start, end),
            Endpoint::MaxLength {
                start: Some(start),
                at,
            } => (start, at),
            _ => {
                misses += 1;
                if misses >= 3 {
                    bail!(
                        "heard nothing three times: check the microphone (`strawberry-spoke audio devices`) and audio.input"
                    );
                }
                eprintln!("heard nothing; once more");
                continue;
            }
        };
        let margin = ms_to_samples(TAKE_MARGIN_MS);
        let from = usize::try_from(start).unwrap_or(0).saturating_sub(margin);
        let to = usize::try_from(end)
            .unwrap_or(usize::MAX)
            .saturating_add(margin)
            .min(audio.len());
        let path = dir.join(format!("take-{:02}.wav", recorded.len() + 1));
        write_wav(&path, &audio[from.min(to)..to], crate::audio::SAMPLE_RATE)?;
        eprintln!(
            "  kept {:.2} s in {}",
            (to - from.min(to)) as f64 / 16_000.0,
            path.display()
        );
        recorded.push(path);
    }
    Ok(recorded)
}

pub(super) fn test(
    config: &Config,
    word: &Path,
    recordings: &[PathBuf],
    threshold: Option<f32>,
) -> Result<ExitCode> {
    let loaded = match word.to_str() {
        Some("bundled") => WakeWord::bundled_of(config.wake.bundled),
        Some("bundled-reference") => WakeWord::bundled_reference(),
        Some("bundled-neural") => WakeWord::bundled_neural(),
        _ => WakeWord::load(word),
    };
    let word = match loaded {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut settings = config.wake.settings();
    if threshold.is_some() {
        settings.threshold = threshold;
    }
    if let Err(e) = settings.check() {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(2));
    }
    let mut failed = false;
    for path in recordings {
        let samples = match audio::read_wav_16k(path) {
            Ok((samples, _)) => samples,
            Err(e) => {
                eprintln!("error: {e}");
                failed = true;
                continue;
            }
        };
        let start = thread_cpu();
        let detections = run(&settings, &word, &samples)?;
        let cpu = thread_cpu().saturating_sub(start);
        let seconds = samples.len() as f64 / f64::from(SAMPLE_RATE);
        let mut text = if detections.is_empty() {
            format!(
                "{}: no detection in {seconds:.2} s (threshold {:.2}); {}\n",
                path.display(),
                word.threshold(&settings),
                closest(&settings, &word, &samples)?
            )
        } else {
            format!(
                "{}: {} detection(s) in {seconds:.2} s (threshold {:.2})\n",
                path.display(),
                detections.len(),
                word.threshold(&settings)
            )
        };
        for d in &detections {
            text.push_str(&format!(
                "  {:?}  {:.2}-{:.2} s  score {:.3}  (average {:.3}, {} frames over the threshold, decided at {:.2} s)\n",
                d.name,
                d.start_secs(),
                d.end_secs(),
                d.score,
                d.avg_score,
                d.frames,
                d.fired_secs()
            ));
        }
        // What listening costs on this machine: the detector's CPU time over the
        // recording and the silence after it.
        let fed = seconds + TAIL_SECONDS as f64;
        text.push_str(&format!(
            "  CPU: {:.2} ms per second of audio, {:.2}% of one core\n",
            cpu.as_secs_f64() * 1000.0 / fed,
            cpu.as_secs_f64() * 100.0 / fed
        ));
        print_out(&text)?;
    }
    Ok(if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// Streams a recording through a detector, then a moment of silence.
fn run(settings: &Settings, word: &WakeWord, samples: &[f32]) -> Result<Vec<Detection>> {
    let mut detector = Detector::with_word(settings, word)?;
    let mut found = Vec::new();
    for chunk in samples.chunks(CHUNK) {
        found.extend(detector.process(chunk));
    }
    found.extend(detector.process(&vec![0.0; TAIL_SECONDS * SAMPLE_RATE as usize]));
    Ok(found)
}

/// The best score anywhere in the recording, from a detector that lets every stretch
/// become a candidate: how far the threshold is from hearing it.
fn closest(settings: &Settings, word: &WakeWord, samples: &[f32]) -> Result<String> {
    let probe = Settings {
        threshold: Some(0.0),
        avg_threshold: 0.0,
        min_scores: 1,
        vad: crate::wake::Vad::Off,
        ..settings.clone()
    };
    let mut detector = Detector::with_word(&probe, word)?;
    for chunk in samples.chunks(CHUNK) {
        detector.process(chunk);
    }
    Ok(match detector.peak() {
        Some((score, end)) => format!(
            "the closest stretch scored {score:.3}, ending at {:.2} s",
            end as f64 / f64::from(SAMPLE_RATE)
        ),
        None => "nothing in it resembles the phrase (the recording may be shorter than it)".into(),
    })
}
