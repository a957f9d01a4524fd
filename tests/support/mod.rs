//! What the integration tests share: real parts to run against (a mosquitto broker, a
//! scripted OpenAI-compatible hub, a daemon with a FIFO microphone, the speech-to-text
//! material), the one way to wait for a condition, and the lock that keeps real-time
//! tests from CPU-heavy ones. The benchmarks include this tree too.
//!
//! `alsa` is not here: it points the process's `HOME` at fake sound cards, so it lives
//! in the `audio` test binary only (tests/audio.rs).

pub mod cpu;
pub mod daemon;
pub mod kitchen;
pub mod live_room;
pub mod llm;
pub mod mosquitto;
pub mod mouth;
pub mod poll;
pub mod room;
pub mod skill;
pub mod stt;
