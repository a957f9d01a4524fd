//! Making a wake word from recordings of it.
//!
//! Each recording is read at any rate and channel count, brought to 16 kHz mono, and
//! cut to the speech in it. Cutting matters: rustpotter compares the live stream with
//! each recording's whole feature sequence, so a second of silence before the phrase
//! would have to be "heard" again, as silence, before every detection. Recordings that
//! cannot make a good word (silent, noise only, too short or long) are refused with
//! the reason, instead of producing a word that never fires.

use std::collections::HashMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use rustpotter::{WakewordRef, WakewordRefBuildFromBuffers};

use super::{SAMPLE_RATE, WakeError, WakeWord};
use crate::stt::audio;

/// Recordings needed at least (two make the averaged reference; three make it robust).
pub const MIN_RECORDINGS: usize = 3;

/// Cepstral coefficients per feature frame (rustpotter's usual size).
const MFCC_SIZE: u16 = 16;

/// Level analysis works on 10 ms blocks.
const BLOCK: usize = SAMPLE_RATE as usize / 100;

/// A recording whose loudest 10 ms are quieter than this holds no usable sound.
const SILENT_DBFS: f32 = -50.0;

/// Speech must stand out from the quietest part by at least this much.
const MIN_CONTRAST_DB: f32 = 10.0;

/// Blocks within this many dB of the loudest count as speech when trimming.
const SPEECH_RANGE_DB: f32 = 30.0;

/// Kept around the speech when trimming: the onset of "h" and the release of the last
/// vowel are quiet but part of the phrase.
const MARGIN_BLOCKS: usize = 3;

/// Shortest and longest speech accepted as a wake phrase, in seconds.
const MIN_SECONDS: f32 = 0.25;
const MAX_SECONDS: f32 = 3.0;

/// What training did with one recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Trimmed {
    /// The recording.
    pub path: PathBuf,
    /// Its length before trimming, in seconds.
    pub seconds: f32,
    /// The speech kept, in seconds.
    pub speech_seconds: f32,
    /// The loudest 10 ms, in dBFS.
    pub peak_dbfs: f32,
}

/// Builds a wake word called `name` from WAV recordings of it (any rate, any channels).
pub fn train(name: &str, files: &[PathBuf]) -> Result<(WakeWord, Vec<Trimmed>), WakeError> {
    if files.len() < MIN_RECORDINGS {
        return Err(WakeError::TooFewSamples {
            got: files.len(),
            need: MIN_RECORDINGS,
        });
    }
    let mut recordings = Vec::with_capacity(files.len());
    for path in files {
        let (samples, _) = audio::read_wav_16k(path)?;
        recordings.push((path.clone(), samples));
    }
    train_from_samples(name, &recordings)
}

/// Builds a wake word from 16 kHz mono recordings, each named by the path it came from.
pub fn train_from_samples(
    name: &str,
    recordings: &[(PathBuf, Vec<f32>)],
) -> Result<(WakeWord, Vec<Trimmed>), WakeError> {
    if recordings.len() < MIN_RECORDINGS {
        return Err(WakeError::TooFewSamples {
            got: recordings.len(),
            need: MIN_RECORDINGS,
        });
    }
    let mut buffers = HashMap::new();
    let mut report = Vec::new();
    for (i, (path, samples)) in recordings.iter().enumerate() {
        let (speech, trimmed) = trim(path, samples)?;
        // rustpotter builds from WAV bytes; the index keeps two `take1.wav` from
        // different folders apart.
        let label = format!(
            "{:02}-{}",
            i + 1,
            path.file_name()
                .map_or_else(|| "recording".into(), |n| n.to_string_lossy())
        );
        buffers.insert(label, wav_bytes(speech));
        report.push(trimmed);
    }
    let inner = WakewordRef::new_from_sample_buffers(name.into(), None, None, buffers, MFCC_SIZE)
        .map_err(|message| WakeError::Invalid {
        origin: format!("wake word {name:?}"),
        message,
    })?;
    let word = WakeWord::from_ref(inner, &format!("wake word {name:?}"))?;
    Ok((word, report))
}

fn db(rms: f32) -> f32 {
    20.0 * rms.max(1e-10).log10()
}

/// The speech in a recording, with a small margin, or why there is none.
fn trim<'a>(path: &Path, samples: &'a [f32]) -> Result<(&'a [f32], Trimmed), WakeError> {
    let levels: Vec<f32> = samples
        .chunks(BLOCK)
        .map(|b| db((b.iter().map(|s| s * s).sum::<f32>() / b.len() as f32).sqrt()))
        .collect();
    let peak = levels.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if levels.is_empty() || peak < SILENT_DBFS {
        return Err(WakeError::Silent {
            path: path.to_path_buf(),
            loudest_dbfs: if peak.is_finite() { peak } else { -200.0 },
        });
    }
    let mut sorted = levels.clone();
    sorted.sort_by(f32::total_cmp);
    // The 10th percentile: the background, even when speech fills most of the file.
    let floor = sorted[sorted.len() / 10];
    if peak - floor < MIN_CONTRAST_DB {
        return Err(WakeError::NoSpeech {
            path: path.to_path_buf(),
            contrast_db: peak - floor,
        });
    }
    let gate = (peak - SPEECH_RANGE_DB).max(floor + MIN_CONTRAST_DB / 2.0);
    let first = levels.iter().position(|&l| l >= gate).unwrap_or(0);
    let last = levels
        .iter()
        .rposition(|&l| l >= gate)
        .unwrap_or(levels.len() - 1);
    let from = first.saturating_sub(MARGIN_BLOCKS) * BLOCK;
    let to = ((last + 1 + MARGIN_BLOCKS) * BLOCK).min(samples.len());
    let speech = &samples[from..to];
    let rate = SAMPLE_RATE as f32;
    let speech_seconds = speech.len() as f32 / rate;
    if !(MIN_SECONDS..=MAX_SECONDS).contains(&speech_seconds) {
        return Err(WakeError::Length {
            path: path.to_path_buf(),
            seconds: speech_seconds,
            min: MIN_SECONDS,
            max: MAX_SECONDS,
        });
    }
    Ok((
        speech,
        Trimmed {
            path: path.to_path_buf(),
            seconds: samples.len() as f32 / rate,
            speech_seconds,
            peak_dbfs: peak,
        },
    ))
}

/// 16 kHz mono float WAV bytes.
fn wav_bytes(samples: &[f32]) -> Vec<u8> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: SAMPLE_RATE,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut out = Cursor::new(Vec::new());
    // Writing to memory fails only on sizes past 4 GiB, which trimming rules out.
    if let Ok(mut writer) = hound::WavWriter::new(&mut out, spec) {
        for &s in samples {
            let _ = writer.write_sample(s);
        }
        let _ = writer.finalize();
    }
    out.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, level: f32, seed: u32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x as f32 / u32::MAX as f32 * 2.0 - 1.0) * level
            })
            .collect()
    }

    /// Silence, a 0.6 s "phrase" (a warbling tone), silence.
    fn phrase(seed: u32) -> Vec<f32> {
        let mut v = noise(8_000, 0.0005, seed);
        v.extend((0..9_600).map(|i| {
            let t = i as f32 / 16_000.0;
            0.3 * (2.0 * std::f32::consts::PI * (300.0 + 200.0 * (7.0 * t).sin()) * t).sin()
        }));
        v.extend(noise(8_000, 0.0005, seed + 1));
        v
    }

    #[test]
    fn trimming_keeps_the_phrase_and_a_margin() {
        let p = phrase(1);
        let (speech, t) = trim(Path::new("a.wav"), &p).unwrap();
        let expected = 9_600 + 2 * MARGIN_BLOCKS * BLOCK;
        assert!(
            speech.len().abs_diff(expected) <= 2 * BLOCK,
            "{} vs {expected}",
            speech.len()
        );
        assert!(
            (t.seconds - 1.6).abs() < 0.01 && t.peak_dbfs > -15.0,
            "{t:?}"
        );
    }

    #[test]
    fn silence_noise_and_bad_lengths_are_refused() {
        let silent = vec![0.0; 16_000];
        let err = trim(Path::new("quiet.wav"), &silent).unwrap_err();
        assert!(matches!(err, WakeError::Silent { .. }), "{err}");
        assert!(err.to_string().contains("quiet.wav"), "{err}");
        let hiss = noise(16_000, 0.2, 3);
        let err = trim(Path::new("hiss.wav"), &hiss).unwrap_err();
        assert!(matches!(err, WakeError::NoSpeech { .. }), "{err}");
        let mut click = vec![0.0; 16_000];
        click[8_000..8_100].fill(0.5);
        let err = trim(Path::new("click.wav"), &click).unwrap_err();
        assert!(matches!(err, WakeError::Length { .. }), "{err}");
    }

    #[test]
    fn too_few_recordings_is_an_error() {
        let recs = vec![(PathBuf::from("a.wav"), phrase(1))];
        let err = train_from_samples("x", &recs).unwrap_err();
        assert!(
            matches!(err, WakeError::TooFewSamples { got: 1, need: 3 }),
            "{err}"
        );
    }

    #[test]
    fn a_trained_word_round_trips_through_its_bytes() {
        let recs: Vec<_> = (0..3)
            .map(|i| (PathBuf::from(format!("t{i}.wav")), phrase(i * 7 + 1)))
            .collect();
        let (word, report) = train_from_samples("tone", &recs).unwrap();
        assert_eq!(
            (word.name(), word.recordings(), report.len()),
            ("tone", 3, 3)
        );
        let back = WakeWord::from_bytes(&word.to_bytes().unwrap(), "mem").unwrap();
        assert_eq!(back.name(), "tone");
        assert_eq!(back.longest_samples(), word.longest_samples());
    }
}
