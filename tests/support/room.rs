//! A simulated room for the echo canceller: the speaker's buffers handed to its
//! reference as a playback callback does (48 kHz, 10 ms at a time), and a microphone
//! that hears the reply delayed, through a reverberant tail, attenuated. Shared by
//! `tests/echo.rs` and `benches/echo.rs`.
#![allow(dead_code)] // the test and the benchmark use different parts

use std::time::{Duration, Instant};

use strawberry_spoke::audio::echo::{Canceller, Reference};
use strawberry_spoke::audio::resample::resample;
use strawberry_spoke::audio::{FRAME_SAMPLES, Frame, SAMPLE_RATE};

/// The speaker's rate.
pub const SPEAKER_RATE: u32 = 48_000;
/// A speaker callback's buffer: 10 ms at 48 kHz.
pub const CALLBACK: usize = 480;

/// Pseudo-random numbers in [-1, 1), the same on every run.
pub fn noise(seed: &mut u64) -> f32 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

/// What the microphone hears of `render` (16 kHz): the direct sound after `delay_ms` at
/// `gain`, then reflections decaying by 60 dB in 300 ms; `len` samples.
pub fn echo_of(render: &[f32], delay_ms: usize, gain: f32, len: usize) -> Vec<f32> {
    let taps = taps(delay_ms, gain);
    let mut y = vec![0.0f32; len];
    for (i, &s) in render.iter().enumerate() {
        if s == 0.0 {
            continue;
        }
        for &(k, h) in &taps {
            if let Some(out) = y.get_mut(i + k) {
                *out += s * h;
            }
        }
    }
    y
}

/// The room's impulse response at 16 kHz, as (delay in samples, gain) pairs: the direct
/// sound after `delay_ms` at `gain`, then reflections decaying by 60 dB in 300 ms.
pub fn taps(delay_ms: usize, gain: f32) -> Vec<(usize, f32)> {
    let sr = SAMPLE_RATE as usize;
    let delay = delay_ms * sr / 1000;
    let mut seed = 7;
    let mut taps = vec![(delay, gain)];
    let tail = sr * 3 / 10;
    for k in (40..tail).step_by(3) {
        let decay = (-6.9 * k as f32 / tail as f32).exp();
        taps.push((delay + k, gain * 0.3 * decay * noise(&mut seed)));
    }
    taps
}

/// Plays `render` (16 kHz) through `reference` at 48 kHz, one frame's worth ahead of
/// each capture frame plus `lead_ms` up front (an ALSA buffer filling), silence once it
/// is over, and runs `mic` through `canceller`.
pub fn play_and_cancel(
    reference: &Reference,
    canceller: &mut Canceller,
    render: &[f32],
    mic: &[f32],
    lead_ms: usize,
) -> Cancelled {
    let played = resample(render, SAMPLE_RATE, SPEAKER_RATE).expect("resample");
    let mut callbacks = played.chunks(CALLBACK);
    let per_frame = FRAME_SAMPLES * (SPEAKER_RATE / SAMPLE_RATE) as usize / CALLBACK;
    for _ in 0..lead_ms / 10 {
        if let Some(buffer) = callbacks.next() {
            reference.played(buffer.to_vec(), SPEAKER_RATE);
        }
    }
    let mut out = Vec::with_capacity(mic.len());
    let mut over_echo = Vec::with_capacity(mic.len() / FRAME_SAMPLES);
    let mut took = Duration::ZERO;
    for (i, samples) in mic.chunks_exact(FRAME_SAMPLES).enumerate() {
        for _ in 0..per_frame {
            let buffer = callbacks
                .next()
                .map_or_else(|| vec![0.0; CALLBACK], <[f32]>::to_vec);
            reference.played(buffer, SPEAKER_RATE);
        }
        let mut frame = Frame {
            start: (i * FRAME_SAMPLES) as u64,
            samples: samples.to_vec(),
        };
        let t = Instant::now();
        canceller.process(&mut frame).expect("the canceller");
        took += t.elapsed();
        out.extend(frame.samples);
        over_echo.push(canceller.over_echo());
    }
    Cancelled {
        out,
        over_echo,
        took,
    }
}

/// What [`play_and_cancel`] returns.
pub struct Cancelled {
    /// What came out of the canceller.
    pub out: Vec<f32>,
    /// Per frame, whether the canceller was taking played sound out as it came out
    /// (what the daemon tells the wake word: `Detector::set_over_echo`).
    pub over_echo: Vec<bool>,
    /// The time the canceller took.
    pub took: Duration,
}

/// Mean power.
pub fn power(x: &[f32]) -> f64 {
    x.iter().map(|&s| f64::from(s) * f64::from(s)).sum::<f64>() / x.len().max(1) as f64
}
