//! The echo canceller ([`crate::audio::echo`]) on the voice loop's capture path: every
//! frame passes through it before the wake word, the end-of-speech detector and Whisper.
//!
//! Why here and not in the capture thread: the canceller is a few hundred microseconds
//! per frame, too much for cpal's callback, and the voice loop's audio thread already
//! reads every frame in order. Why the systemd status: a canceller that cannot work (no
//! delay found, played audio lost) lets the spoke hear itself, which a user only notices
//! as "it ignores me while it talks"; the status says it where they look.

use std::sync::Arc;

use super::systemd::Notifier;
use crate::audio::Frame;
use crate::audio::echo::{Canceller, EchoHealth};

/// The canceller as the audio thread uses it: frames in place, trouble logged and shown.
pub struct EchoStage {
    canceller: Canceller,
    notifier: Arc<Notifier>,
    shown: EchoHealth,
    failures: u64,
}

impl EchoStage {
    /// Wraps `canceller`; its trouble goes to `notifier`'s status.
    pub fn new(canceller: Canceller, notifier: Arc<Notifier>) -> EchoStage {
        EchoStage {
            canceller,
            notifier,
            shown: EchoHealth::Idle,
            failures: 0,
        }
    }

    /// Whether the linear filter's output is heard ([`Canceller::set_linear`]).
    pub fn set_linear(&mut self, linear: bool) {
        self.canceller.set_linear(linear);
    }

    /// Whether played sound is being taken out of what is heard ([`Canceller::over_echo`]).
    pub fn over_echo(&self) -> bool {
        self.canceller.over_echo()
    }

    /// No frame has come for a while ([`Canceller::microphone_silent`]).
    pub fn microphone_silent(&mut self) {
        self.canceller.microphone_silent();
    }

    /// Takes the echo out of `frame`. A block AEC3 rejects is passed on as heard.
    pub fn process(&mut self, frame: &mut Frame) {
        if let Err(error) = self.canceller.process(frame) {
            self.failures += 1;
            if self.failures.is_power_of_two() {
                tracing::warn!(failures = self.failures, "{error}");
            }
        }
        let health = self.canceller.health();
        if std::mem::discriminant(health) != std::mem::discriminant(&self.shown) {
            if let Some(note) = health.note() {
                self.notifier.status(&note);
            }
            self.shown = health.clone();
        }
    }
}
