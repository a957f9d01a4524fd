//! Audio for speech to text: WAV files in, 16 kHz mono f32 out.
//!
//! Why here: Whisper only takes 16 kHz mono, while recordings (and sound cards) come at
//! 44.1/48/22.05 kHz, in stereo, as integers. The resampler is a windowed-sinc filter:
//! cheap at these lengths (a few ms per second of audio) and clean enough that the
//! transcript does not depend on the input rate.

use std::path::{Path, PathBuf};

use super::SAMPLE_RATE;

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
    /// The file holds no audio.
    #[error("{path}: the file holds no audio")]
    Empty { path: PathBuf },
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

/// Reads a WAV file (8/16/24/32-bit integer or 32-bit float, any rate, any channels)
/// and mixes it to mono.
pub fn read_wav(path: &Path) -> Result<Recording, AudioError> {
    let wav_err = |source| AudioError::Wav {
        path: path.to_path_buf(),
        source,
    };
    let reader = hound::WavReader::open(path).map_err(wav_err)?;
    let spec = reader.spec();
    let channels = usize::from(spec.channels.max(1));
    let interleaved: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Float => reader
            .into_samples::<f32>()
            .collect::<Result<_, _>>()
            .map_err(wav_err)?,
        hound::SampleFormat::Int => {
            let scale = 1.0 / (1u64 << (spec.bits_per_sample.clamp(1, 32) - 1)) as f32;
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

/// Zero crossings of the sinc kernel on each side, at the lower of the two rates.
const KERNEL_ZEROS: f64 = 16.0;

/// Resamples mono audio from `from` Hz to `to` Hz with a Hann-windowed sinc low-pass at
/// 95% of the lower Nyquist frequency.
pub fn resample(input: &[f32], from: u32, to: u32) -> Vec<f32> {
    if from == to || input.is_empty() || from == 0 || to == 0 {
        return input.to_vec();
    }
    let step = f64::from(from) / f64::from(to);
    // Cut-off in cycles per input sample.
    let scale = (f64::from(to) / f64::from(from)).min(1.0);
    let cutoff = 0.5 * scale * 0.95;
    let half_width = KERNEL_ZEROS / scale;
    let len = ((input.len() as f64) / step).floor() as usize;
    let mut out = Vec::with_capacity(len);
    for n in 0..len {
        let t = n as f64 * step;
        let first = (t - half_width).ceil().max(0.0) as usize;
        let last = ((t + half_width).floor() as usize).min(input.len() - 1);
        let mut acc = 0.0f64;
        let mut norm = 0.0f64;
        for (k, &x) in input.iter().enumerate().take(last + 1).skip(first) {
            let d = t - k as f64;
            let window = 0.5 + 0.5 * (std::f64::consts::PI * d / half_width).cos();
            let arg = 2.0 * cutoff * d;
            let sinc = if arg.abs() < 1e-12 {
                1.0
            } else {
                (std::f64::consts::PI * arg).sin() / (std::f64::consts::PI * arg)
            };
            let h = 2.0 * cutoff * sinc * window;
            acc += f64::from(x) * h;
            norm += h;
        }
        // Normalising by the kernel's sum keeps DC gain at 1, at the edges too.
        out.push(if norm.abs() > 1e-9 {
            (acc / norm) as f32
        } else {
            0.0
        });
    }
    out
}

/// Reads a WAV file and returns 16 kHz mono samples, with the file's own format.
pub fn read_wav_16k(path: &Path) -> Result<(Vec<f32>, Recording), AudioError> {
    let recording = read_wav(path)?;
    let samples = resample(&recording.samples, recording.sample_rate, SAMPLE_RATE);
    Ok((samples, recording))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(freq: f64, rate: u32, seconds: f64) -> Vec<f32> {
        (0..(f64::from(rate) * seconds) as usize)
            .map(|i| (2.0 * std::f64::consts::PI * freq * i as f64 / f64::from(rate)).sin() as f32)
            .collect()
    }

    fn rms(x: &[f32]) -> f64 {
        (x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / x.len() as f64).sqrt()
    }

    #[test]
    fn resampling_keeps_speech_band_and_drops_what_cannot_be_represented() {
        // 1 kHz survives 48 kHz -> 16 kHz at full level and at the right frequency.
        let out = resample(&tone(1000.0, 48_000, 1.0), 48_000, 16_000);
        assert_eq!(out.len(), 16_000);
        let expected = tone(1000.0, 16_000, 1.0);
        let mid = &out[1000..15_000];
        let err: f64 = mid
            .iter()
            .zip(&expected[1000..15_000])
            .map(|(a, b)| f64::from(a - b).abs())
            .fold(0.0, f64::max);
        assert!(err < 0.01, "max error {err}");
        // 12 kHz cannot exist at 16 kHz: it must be filtered, not aliased to 4 kHz.
        let aliased = resample(&tone(12_000.0, 48_000, 1.0), 48_000, 16_000);
        assert!(rms(&aliased[1000..15_000]) < 0.01, "{}", rms(&aliased));
        // Upsampling keeps the level too.
        let up = resample(&tone(440.0, 8_000, 1.0), 8_000, 16_000);
        assert_eq!(up.len(), 16_000);
        assert!((rms(&up[1000..15_000]) - std::f64::consts::FRAC_1_SQRT_2).abs() < 0.01);
    }

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
    fn bad_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.wav");
        std::fs::write(&path, b"RIFF....not really").unwrap();
        assert!(matches!(read_wav(&path), Err(AudioError::Wav { .. })));
        let missing = read_wav(&dir.path().join("none.wav")).unwrap_err();
        assert!(missing.to_string().contains("none.wav"), "{missing}");
    }
}
