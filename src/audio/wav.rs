//! WAV files: read any PCM or float WAV as mono, and a source that delivers a file as
//! the same 16 kHz frames a microphone does (for tests and `listen FILE.wav`).
//!
//! A header is checked before any sample is read: a file can claim any rate, channel
//! count or data length, and every later step (the sample buffer, the resampler) sizes
//! its memory from those claims.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use super::resample::{MAX_RATE, MIN_RATE, RateError, resample};
use super::{FRAME_SAMPLES, Frame, SAMPLE_RATE};

/// Why a WAV file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AudioError {
    /// The file could not be opened or is not a WAV file hound understands.
    #[error("cannot read {path}: {source} (a PCM or float WAV file is expected)")]
    Wav {
        path: PathBuf,
        #[source]
        source: hound::Error,
    },
    /// The header claims something no sound file has.
    #[error("{path}: {problem}; the file is damaged or not a sound recording")]
    Header { path: PathBuf, problem: String },
    /// The file's rate cannot be converted to 16 kHz.
    #[error("{path}: {source}")]
    Rate {
        path: PathBuf,
        #[source]
        source: RateError,
    },
    /// The file holds no audio.
    #[error("{path}: the file holds no audio")]
    Empty { path: PathBuf },
    /// The file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: hound::Error,
    },
    /// The thread that delivers the frames could not start.
    #[error("cannot start the audio source thread: {source}")]
    Thread {
        #[source]
        source: std::io::Error,
    },
}

/// Writes mono samples in `[-1, 1]` as a 16-bit PCM WAV file.
pub fn write_wav(path: &Path, samples: &[f32], rate: u32) -> Result<(), AudioError> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let err = |source| AudioError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut writer = hound::WavWriter::create(path, spec).map_err(err)?;
    for &s in samples {
        // Truncation is the conversion: the value is already scaled into i16's range.
        writer
            .write_sample((s.clamp(-1.0, 1.0) * 32767.0) as i16)
            .map_err(err)?;
    }
    writer.finalize().map_err(err)
}

/// A WAV file's audio, mixed to mono, at its own rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Recording {
    /// Mono samples in `[-1, 1]`.
    pub samples: Vec<f32>,
    /// The file's sample rate.
    pub sample_rate: u32,
    /// The file's channel count (before mixing).
    pub channels: u16,
}

/// Most channels accepted (a large microphone array has 16 or 32).
pub const MAX_CHANNELS: u16 = 32;

/// Checks what a header claims before anything is sized from it: rate, channels, sample
/// format, and that the data it announces fits in the file.
fn check_header(
    path: &Path,
    spec: hound::WavSpec,
    samples: u64,
    file_bytes: u64,
) -> Result<(), AudioError> {
    let bad = |problem: String| {
        Err(AudioError::Header {
            path: path.to_path_buf(),
            problem,
        })
    };
    if !(MIN_RATE..=MAX_RATE).contains(&spec.sample_rate) {
        return bad(format!(
            "sample rate of {} Hz is outside {MIN_RATE}..={MAX_RATE} Hz",
            spec.sample_rate
        ));
    }
    if !(1..=MAX_CHANNELS).contains(&spec.channels) {
        return bad(format!(
            "{} channels is outside 1..={MAX_CHANNELS}",
            spec.channels
        ));
    }
    let sane_bits = match spec.sample_format {
        // Extensible files may say 20 valid bits in a 24-bit container.
        hound::SampleFormat::Int => (1..=32).contains(&spec.bits_per_sample),
        hound::SampleFormat::Float => spec.bits_per_sample == 32,
    };
    if !sane_bits {
        return bad(format!(
            "{} bits per {:?} sample is not supported (integer up to 32 bits, 32-bit float)",
            spec.bits_per_sample, spec.sample_format
        ));
    }
    let data_bytes = samples.saturating_mul(u64::from(spec.bits_per_sample.div_ceil(8)));
    if data_bytes > file_bytes {
        return bad(format!(
            "the header announces {data_bytes} bytes of audio but the file has only {file_bytes} bytes"
        ));
    }
    Ok(())
}

/// A float sample brought into `[-1, 1]`: a float file may hold anything (values past
/// full scale, infinities, NaN), and everything after the reader (VAD levels, whisper)
/// assumes full-scale audio, as an integer file always gives.
fn full_scale(sample: f32) -> f32 {
    if sample.is_nan() {
        0.0
    } else {
        sample.clamp(-1.0, 1.0)
    }
}

/// Reads a WAV file (8/16/24/32-bit integer or 32-bit float, 1 to [`MAX_CHANNELS`]
/// channels, a rate from 4 to 384 kHz) and mixes it to mono.
pub fn read_wav(path: &Path) -> Result<Recording, AudioError> {
    let wav_err = |source| AudioError::Wav {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(|e| wav_err(hound::Error::IoError(e)))?;
    let file_bytes = file
        .metadata()
        .map_err(|e| wav_err(hound::Error::IoError(e)))?
        .len();
    let reader = hound::WavReader::new(std::io::BufReader::new(file)).map_err(wav_err)?;
    let spec = reader.spec();
    check_header(path, spec, u64::from(reader.len()), file_bytes)?;
    let channels = usize::from(spec.channels);
    let interleaved: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Float => reader
            .into_samples::<f32>()
            .map(|s| s.map(full_scale))
            .collect::<Result<_, _>>()
            .map_err(wav_err)?,
        hound::SampleFormat::Int => {
            let scale = 1.0 / (1u64 << (spec.bits_per_sample - 1)) as f32;
            reader
                .into_samples::<i32>()
                .map(|s| s.map(|v| v as f32 * scale))
                .collect::<Result<_, _>>()
                .map_err(wav_err)?
        }
    };
    if interleaved.len() < channels {
        return Err(AudioError::Empty {
            path: path.to_path_buf(),
        });
    }
    let samples = interleaved
        .chunks_exact(channels)
        .map(|frame| frame.iter().sum::<f32>() / channels as f32)
        .collect();
    Ok(Recording {
        samples,
        sample_rate: spec.sample_rate,
        channels: spec.channels,
    })
}

/// Reads a WAV file and returns 16 kHz mono samples, with the file's own format.
pub fn read_wav_16k(path: &Path) -> Result<(Vec<f32>, Recording), AudioError> {
    let recording = read_wav(path)?;
    let samples =
        resample(&recording.samples, recording.sample_rate, SAMPLE_RATE).map_err(|source| {
            AudioError::Rate {
                path: path.to_path_buf(),
                source,
            }
        })?;
    Ok((samples, recording))
}

/// Cuts 16 kHz mono samples into [`Frame`]s of [`FRAME_SAMPLES`] (the last one may be
/// shorter), numbered from `start`.
pub fn frames(samples: &[f32], start: u64) -> impl Iterator<Item = Frame> + '_ {
    samples
        .chunks(FRAME_SAMPLES)
        .enumerate()
        .map(move |(i, chunk)| Frame {
            start: start + (i * FRAME_SAMPLES) as u64,
            samples: chunk.to_vec(),
        })
}

/// A WAV file as a frame source: a thread sends its frames over a channel, like the
/// microphone's capture thread, either as fast as the consumer takes them or at
/// real-time pace. The channel closes at the end of the file.
pub fn wav_source(path: &Path, real_time: bool) -> Result<mpsc::Receiver<Frame>, AudioError> {
    let (samples, _) = read_wav_16k(path)?;
    // Bounded like the capture's channel: a slow consumer slows the file, not memory.
    let (tx, rx) = mpsc::sync_channel(64);
    std::thread::Builder::new()
        .name("wav-source".into())
        .spawn(move || {
            let pace = Duration::from_secs_f64(FRAME_SAMPLES as f64 / f64::from(SAMPLE_RATE));
            let started = std::time::Instant::now();
            for (i, frame) in frames(&samples, 0).enumerate() {
                if real_time {
                    let due = pace * i as u32;
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
                if tx.send(frame).is_err() {
                    return;
                }
            }
        })
        .map_err(|source| AudioError::Thread { source })?;
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stereo_24_bit_wav_is_mixed_to_mono() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.wav");
        let spec = hound::WavSpec {
            channels: 2,
            sample_rate: 22_050,
            bits_per_sample: 24,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(&path, spec).unwrap();
        for _ in 0..100 {
            w.write_sample(1 << 22).unwrap(); // 0.5
            w.write_sample(0).unwrap();
        }
        w.finalize().unwrap();
        let rec = read_wav(&path).unwrap();
        assert_eq!((rec.sample_rate, rec.channels), (22_050, 2));
        assert_eq!(rec.samples.len(), 100);
        assert!((rec.samples[0] - 0.25).abs() < 1e-6);
    }

    #[test]
    fn float_samples_past_full_scale_are_clamped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.wav");
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 16_000,
            bits_per_sample: 32,
            sample_format: hound::SampleFormat::Float,
        };
        let mut w = hound::WavWriter::create(&path, spec).unwrap();
        for v in [6.3e37, -2.0, f32::NAN, f32::INFINITY, 0.5] {
            w.write_sample(v).unwrap();
        }
        w.finalize().unwrap();
        let rec = read_wav(&path).unwrap();
        assert_eq!(rec.samples, [1.0, -1.0, 0.0, 1.0, 0.5]);
    }

    #[test]
    fn bad_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.wav");
        std::fs::write(&path, b"RIFF....not really").unwrap();
        assert!(matches!(read_wav(&path), Err(AudioError::Wav { .. })));
        let missing = read_wav(&dir.path().join("none.wav")).unwrap_err();
        assert!(missing.to_string().contains("none.wav"), "{missing}");
    }

    /// A 16-bit mono PCM WAV whose header says `rate`, `channels` and `data_bytes`,
    /// followed by `actual` bytes of silence.
    fn crafted(rate: u32, channels: u16, bits: u16, data_bytes: u32, actual: usize) -> Vec<u8> {
        let block = channels * bits / 8;
        let mut b = Vec::new();
        b.extend_from_slice(b"RIFF");
        b.extend_from_slice(&(36 + data_bytes).to_le_bytes());
        b.extend_from_slice(b"WAVEfmt ");
        b.extend_from_slice(&16u32.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&channels.to_le_bytes());
        b.extend_from_slice(&rate.to_le_bytes());
        b.extend_from_slice(&(rate * u32::from(block)).to_le_bytes());
        b.extend_from_slice(&block.to_le_bytes());
        b.extend_from_slice(&bits.to_le_bytes());
        b.extend_from_slice(b"data");
        b.extend_from_slice(&data_bytes.to_le_bytes());
        b.resize(b.len() + actual, 0);
        b
    }

    #[test]
    fn hostile_headers_are_refused_naming_file_and_problem() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (crafted(1, 1, 16, 3200, 3200), "sample rate of 1 Hz"),
            (
                crafted(1_000_000, 1, 16, 3200, 3200),
                "sample rate of 1000000 Hz",
            ),
            (crafted(16_000, 200, 16, 3200, 3200), "200 channels"),
            (
                crafted(16_000, 1, 16, 0xFFFF_FF00, 64),
                "announces 4294967040 bytes",
            ),
        ];
        for (i, (bytes, problem)) in cases.into_iter().enumerate() {
            let path = dir.path().join(format!("hostile-{i}.wav"));
            std::fs::write(&path, bytes).unwrap();
            let err = read_wav(&path).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, AudioError::Header { .. }), "{text}");
            assert!(text.contains(&format!("hostile-{i}.wav")), "{text}");
            assert!(text.contains(problem), "{problem:?} not in {text}");
        }
        let fine = dir.path().join("fine.wav");
        std::fs::write(&fine, crafted(8_000, 2, 16, 3200, 3200)).unwrap();
        let rec = read_wav(&fine).unwrap();
        assert_eq!((rec.sample_rate, rec.samples.len()), (8_000, 800));
    }

    #[test]
    fn wav_source_delivers_numbered_frames() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.wav");
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 16_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(&path, spec).unwrap();
        for i in 0..1000 {
            w.write_sample(i as i16).unwrap();
        }
        w.finalize().unwrap();
        let got: Vec<Frame> = wav_source(&path, false).unwrap().iter().collect();
        assert_eq!(got.len(), 4);
        assert_eq!(got[3].start, 3 * FRAME_SAMPLES as u64);
        assert_eq!(got.iter().map(|f| f.samples.len()).sum::<usize>(), 1000);
        assert!((got[1].samples[0] - FRAME_SAMPLES as f32 / 32768.0).abs() < 1e-6);
    }
}
