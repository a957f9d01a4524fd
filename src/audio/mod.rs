//! Audio in and out: the microphone (cpal) or a WAV file as 16 kHz mono f32 frames,
//! and the speaker.
//!
//! Why this shape: everything after the microphone (wake word, [`crate::vad`], Whisper)
//! works on 16 kHz mono, while sound cards come at 44.1/48 kHz, in stereo, as integers.
//! So conversion happens once, here, and consumers only ever see [`Frame`]s of 20 ms.
//! One thread owns the device ([`capture`]); cpal's callback only mixes to mono and
//! hands samples over without blocking, and consumers read frames from a channel, as in
//! mini-redis or rumqtt where one task owns the connection and others talk to it over
//! channels. A lost device is retried with capped backoff, never a crash.
//!
//! - [`capture`]: the microphone thread: open, convert, retry.
//! - [`cues`]: the short tones that say "I heard you", "done" and "that failed".
//! - [`devices`]: what inputs and outputs exist and what they support.
//! - [`echo`]: the echo canceller, which takes what the speaker plays out of what the
//!   microphone hears.
//! - [`playback`]: the speaker, opened only while there is something to play.
//! - [`preroll`]: the ring buffer that keeps the audio before a trigger.
//! - [`resample`]: windowed-sinc rate conversion, in one go or streamed.
//! - [`wav`]: WAV files, and a WAV file as a frame source.

pub mod capture;
pub mod cues;
pub mod devices;
pub mod echo;
pub mod playback;
pub mod preroll;
pub mod resample;
pub mod wav;

pub use capture::{Capture, CaptureError, CaptureSettings, CaptureStatus};
pub use preroll::PreRoll;

/// The rate every consumer works at (Whisper's).
pub const SAMPLE_RATE: u32 = 16_000;

/// Samples in one [`Frame`]: 20 ms at 16 kHz.
pub const FRAME_SAMPLES: usize = 320;

/// A piece of 16 kHz mono audio, [`FRAME_SAMPLES`] long (a file's last may be shorter).
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Position of the first sample, counted in 16 kHz samples since the source began.
    pub start: u64,
    /// Samples in `[-1, 1]`.
    pub samples: Vec<f32>,
}

impl Frame {
    /// Position just past the last sample.
    pub fn end(&self) -> u64 {
        self.start + self.samples.len() as u64
    }
}

/// Milliseconds as a count of 16 kHz samples.
pub fn ms_to_samples(ms: u64) -> usize {
    usize::try_from(ms * u64::from(SAMPLE_RATE) / 1000).unwrap_or(usize::MAX)
}
