//! The voice loop: microphone -> wake word -> command -> transcript -> conversation
//! turn -> speech, one turn at a time. This file starts and stops it; its parts:
//!
//! - [`super::audio_loop`], the *audio thread*, owns the [`Capture`] and the
//!   [`Listener`]; it never waits on anything but the microphone, so the wake word is
//!   heard even while a reply is being worked out or spoken;
//! - [`super::conversation`], the *conversation task*, receives what was heard and runs
//!   one [`Pipeline::respond`] at a time as its own task, so a wake word during a turn
//!   can abort it (barge-in) or, with `wake.interrupt = false`, queue the next command
//!   behind it; its decisions are plain logic in [`super::routing`], [`super::ringing`]
//!   (due timers) and [`super::arbiter`] (several spokes heard the same wake word);
//! - the [`crate::tts::Speaker`] thread synthesises and plays sentences as they stream.
//!
//! [`Pipeline`] is the part `listen FILE.wav` shares: one command from audio to reply.
//!
//! Confirming by voice: when model code calls a `@confirm` function, the turn says the
//! question, waits until it has been spoken (the spoke must not hear itself), and asks
//! its [`Ear`] for the next utterance without the wake word. In `run` that request goes
//! to the conversation task, which opens the follow-up window of the audio thread's
//! [`Listener`] (`vad.confirm_ms` long) and hands the command or silence it hears back
//! to the waiting turn instead of starting a turn with it.
//!
//! Speech that does not come from a turn (a skill's `say`, an announcement from another
//! room, a timer coming due) arrives as [`Spoken`] items from the skills and waits in
//! the conversation task until no turn runs and nobody is being listened to, so it is
//! never cut into a reply. A due timer *rings*: the ring cue and its line, repeated
//! after a quiet gap, while a listening window without the wake word stays open; "stop"
//! (or the wake word) ends it, or `timers.ring_ms` does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::arbiter::Arbiter;
use super::audio_loop::AudioLoop;
use super::conversation::Conversation;
pub use super::conversation::VoiceSettings;
use super::listener::{Command, Guess, Listener};
use super::pipeline::{Ear, Pipeline};
use super::systemd::{Heartbeat, Notifier};
use crate::audio::{Capture, CaptureStatus};
use crate::host::spoken::Spoken;

/// Where the questions of `run`'s turns are heard: the ear to give the [`Pipeline`],
/// and its requests, for [`Voice::start`] (the conversation task answers them).
pub fn ear() -> (Arc<dyn Ear>, Asks) {
    let (asks, requests) = mpsc::unbounded_channel();
    (Arc::new(LoopEar { asks }), Asks(requests))
}

/// A turn's requests for the answer to its question; see [`ear`].
pub struct Asks(mpsc::UnboundedReceiver<oneshot::Sender<Option<Command>>>);

/// The ear of `run`: asks the conversation task for the next utterance.
struct LoopEar {
    asks: mpsc::UnboundedSender<oneshot::Sender<Option<Command>>>,
}

impl Ear for LoopEar {
    fn next_utterance(&self) -> oneshot::Receiver<Option<Command>> {
        let (reply, answer) = oneshot::channel();
        // A stopped loop drops the request, which reads as nobody answering.
        let _ = self.asks.send(reply);
        answer
    }
}

/// The running voice loop.
pub struct Voice {
    stop: CancellationToken,
    task: JoinHandle<()>,
    audio: Option<std::thread::JoinHandle<()>>,
    /// Beats while the audio thread runs.
    pub audio_beat: Heartbeat,
    /// Beats while the conversation task runs and no turn is stuck.
    pub turn_beat: Heartbeat,
}

/// What the loop hears with: the microphone, the listener that finds the wake word and
/// the command in it, the wake word's name (for the status line), and the turns'
/// requests for the answers to their questions (see [`ear`]).
pub struct Ears {
    pub capture: Capture,
    pub listener: Listener,
    pub wake_name: String,
    pub asks: Asks,
    /// The echo canceller, when there is one (see [`super::echo`]).
    pub echo: Option<crate::audio::echo::Canceller>,
}

impl Voice {
    /// Starts the audio thread and the conversation task (on the current runtime); both
    /// stop when `stop` is cancelled.
    pub fn start(
        stop: CancellationToken,
        pipeline: Arc<Pipeline>,
        ears: Ears,
        settings: VoiceSettings,
        notifier: Arc<Notifier>,
        spoken: mpsc::Receiver<Spoken>,
        link: Option<crate::mqtt::Link>,
    ) -> std::io::Result<Voice> {
        let Ears {
            capture,
            listener,
            wake_name,
            asks,
            echo,
        } = ears;
        let (heard_tx, heard_rx) = mpsc::unbounded_channel();
        let (control_tx, control_rx) = std::sync::mpsc::channel();
        let (judged_tx, judged) = mpsc::unbounded_channel();
        let (paused_tx, paused_rx) = mpsc::unbounded_channel();
        let audio_beat = Heartbeat::new();
        let turn_beat = Heartbeat::new();
        let capture_status = Arc::new(Mutex::new(CaptureStatus::Starting));
        let audio = AudioLoop {
            capture,
            listener,
            heard: heard_tx,
            paused: paused_tx,
            control: control_rx,
            stop: stop.clone(),
            beat: audio_beat.clone(),
            status: capture_status.clone(),
            echo: echo.map(|c| super::echo::EchoStage::new(c, notifier.clone())),
        };
        let audio = std::thread::Builder::new()
            .name("voice-audio".into())
            .spawn(move || audio.run())?;
        let conversation = Conversation {
            pipeline,
            settings,
            heard: heard_rx,
            control: control_tx,
            asks: asks.0,
            answer: None,
            stop: stop.clone(),
            ending: JoinSet::new(),
            beat: turn_beat.clone(),
            notifier,
            capture_status,
            idle_status: format!("Listening for \"{wake_name}\""),
            shown: String::new(),
            spoken,
            later: VecDeque::new(),
            ringing: None,
            listening: false,
            arbiter: link
                .filter(|_| settings.arbitration_ms > 0)
                .map(|link| Arbiter::new(link, Duration::from_millis(settings.arbitration_ms))),
            round: None,
            lost_from: None,
            paused: paused_rx,
            judged,
            judged_tx,
            judging: None,
            waiting: None,
            next_pause: None,
            guess: Guess::default(),
        };
        let task = tokio::spawn(conversation.run());
        Ok(Voice {
            stop,
            task,
            audio: Some(audio),
            audio_beat,
            turn_beat,
        })
    }

    /// Stops the loop and waits for its parts: the turn in progress is abandoned,
    /// speech stops, the microphone closes.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        let _ = (&mut self.task).await;
        if let Some(audio) = self.audio.take() {
            let _ = tokio::task::spawn_blocking(move || audio.join()).await;
        }
    }
}
