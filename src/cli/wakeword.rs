//! `wakeword train` and `wakeword test`: making a wake word and seeing how it scores.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

use super::print_out;
use crate::config::Config;
use crate::stt::audio;
use crate::wake::{Detection, Detector, SAMPLE_RATE, Settings, WakeWord, train as wake_train};

/// Audio is fed in chunks of this many samples (100 ms), as a sound card would.
const CHUNK: usize = SAMPLE_RATE as usize / 10;

/// Silence fed after a recording: the detector waits a moment after the best match
/// before it decides, so a phrase at the very end needs this to be reported.
const TAIL_SECONDS: usize = 1;

pub(super) fn train(name: &str, out: &Path, samples: &[PathBuf]) -> Result<ExitCode> {
    let name = name.trim();
    if name.is_empty() {
        eprintln!(
            "error: --name must not be empty: give the phrase, e.g. --name \"hey strawberry\""
        );
        return Ok(ExitCode::from(2));
    }
    let (word, report) = match wake_train::train(name, samples) {
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

pub(super) fn test(
    config: &Config,
    word: &Path,
    recordings: &[PathBuf],
    threshold: Option<f32>,
) -> Result<ExitCode> {
    let loaded = if word == Path::new("bundled") {
        WakeWord::bundled()
    } else {
        WakeWord::load(word)
    };
    let word = match loaded {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut settings = config.wake.settings();
    if let Some(t) = threshold {
        settings.threshold = t;
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
        let detections = run(&settings, &word, &samples)?;
        let seconds = samples.len() as f64 / f64::from(SAMPLE_RATE);
        let mut text = if detections.is_empty() {
            format!(
                "{}: no detection in {seconds:.2} s (threshold {:.2}); {}\n",
                path.display(),
                settings.threshold,
                closest(&settings, &word, &samples)?
            )
        } else {
            format!(
                "{}: {} detection(s) in {seconds:.2} s (threshold {:.2})\n",
                path.display(),
                detections.len(),
                settings.threshold
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
        threshold: 0.0,
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
