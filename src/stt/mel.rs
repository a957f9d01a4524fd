//! The log-mel spectrogram of the command alone, for [`super::Padding::Zeros`].
//!
//! The encoder reads a fixed number of frames: the command's, then padding. whisper.cpp
//! pads the audio with 30 s of silence before its spectrogram, so the padding frames
//! are the floor of the clamp (the loudest value less 8 in log10: openai-whisper's way).
//! faster-whisper takes the spectrogram of the command alone and pads that with zeros,
//! the level of a quiet room rather than of no signal at all; its maintainers kept that
//! for the small models after measuring both on long recordings (tiny and base erred
//! less with it: SYSTRAN/faster-whisper#1084). This makes the command's frames as
//! faster-whisper computes them; given them, whisper.cpp fills the rest of the
//! encoder's window with zeros (it zeroes whatever the spectrogram does not cover).

use std::sync::Arc;

use rustfft::num_complex::Complex32;
use rustfft::{Fft, FftPlanner};

/// Samples per FFT window (25 ms).
const N_FFT: usize = 400;

/// Samples between frames (10 ms).
const HOP: usize = 160;

/// Makes spectrograms for one model's number of mel bands.
pub(super) struct MelMaker {
    fft: Arc<dyn Fft<f32>>,
    window: Vec<f32>,
    filters: Vec<f32>,
    n_mels: usize,
}

/// A log-mel spectrogram, `n_mels` rows of `frames`, normalised as the encoder expects.
pub(super) struct Mel {
    pub data: Vec<f32>,
    pub frames: usize,
    pub n_mels: usize,
}

impl MelMaker {
    pub fn new(n_mels: usize) -> MelMaker {
        MelMaker {
            fft: FftPlanner::new().plan_fft_forward(N_FFT),
            // Periodic Hann, as torch.hann_window and faster-whisper's.
            window: (0..N_FFT)
                .map(|i| 0.5 - 0.5 * (2.0 * std::f32::consts::PI * i as f32 / N_FFT as f32).cos())
                .collect(),
            filters: super::ct2::mel_filters(n_mels, N_FFT, f64::from(super::SAMPLE_RATE)),
            n_mels,
        }
    }

    /// The spectrogram of 16 kHz `samples`: one frame per 10 ms, each window centred on
    /// its frame (reflected at the start, silence past the end), power through the mel
    /// filters, log10, clamped at 8 below the loudest value, scaled to about [-1, 1].
    pub fn log_mel(&self, samples: &[f32]) -> Mel {
        let frames = (samples.len() / HOP).max(1);
        let bins = N_FFT / 2 + 1;
        let mut data = vec![0f32; self.n_mels * frames];
        let mut buffer = vec![Complex32::default(); N_FFT];
        let mut power = vec![0f32; bins];
        for frame in 0..frames {
            for (j, slot) in buffer.iter_mut().enumerate() {
                let at = (frame * HOP + j) as isize - (N_FFT / 2) as isize;
                let sample = if at < 0 {
                    samples.get(at.unsigned_abs()).copied().unwrap_or(0.0)
                } else {
                    samples.get(at as usize).copied().unwrap_or(0.0)
                };
                *slot = Complex32::new(sample * self.window[j], 0.0);
            }
            self.fft.process(&mut buffer);
            for (p, c) in power.iter_mut().zip(&buffer) {
                *p = c.norm_sqr();
            }
            for m in 0..self.n_mels {
                let row = &self.filters[m * bins..(m + 1) * bins];
                let energy: f32 = row.iter().zip(&power).map(|(w, p)| w * p).sum();
                data[m * frames + frame] = energy.max(1e-10).log10();
            }
        }
        let floor = data.iter().copied().fold(f32::NEG_INFINITY, f32::max) - 8.0;
        for v in &mut data {
            *v = (v.max(floor) + 4.0) / 4.0;
        }
        Mel {
            data,
            frames,
            n_mels: self.n_mels,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tone_lands_in_its_band_and_silence_on_the_floor() {
        let rate = super::super::SAMPLE_RATE as f32;
        // 0.5 s of a 1 kHz tone, then 0.5 s of silence.
        let mut samples: Vec<f32> = (0..8000)
            .map(|i| 0.5 * (2.0 * std::f32::consts::PI * 1000.0 * i as f32 / rate).sin())
            .collect();
        samples.resize(16000, 0.0);
        let mel = MelMaker::new(80).log_mel(&samples);
        assert_eq!((mel.frames, mel.n_mels, mel.data.len()), (100, 80, 8000));
        let at = |m: usize, f: usize| mel.data[m * mel.frames + f];
        let loudest = (0..80)
            .max_by(|&a, &b| at(a, 25).total_cmp(&at(b, 25)))
            .unwrap();
        // 1 kHz is 15 on the Slaney mel scale, the centre of band 26 of 80 at 16 kHz.
        assert!((25..=27).contains(&loudest), "loudest band {loudest}");
        let max = mel.data.iter().copied().fold(f32::MIN, f32::max);
        let floor = (max * 4.0 - 4.0 - 8.0 + 4.0) / 4.0;
        assert!(
            (at(loudest, 90) - floor).abs() < 1e-5,
            "silence is the floor"
        );
        assert!(at(0, 25) < at(loudest, 25));
    }
}
