//! Audio for speech to text: WAV files in, 16 kHz mono f32 out.
//!
//! The work is done in [`crate::audio`] (shared with the microphone); this module keeps
//! the names speech-to-text code and its tests use.

pub use crate::audio::resample::resample;
pub use crate::audio::wav::{AudioError, Recording, read_wav, read_wav_16k};
