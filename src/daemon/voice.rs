//! The voice loop: microphone -> wake word -> command -> transcript -> conversation
//! turn -> speech, one turn at a time.
//!
//! Shape (as in rumqtt's event loop, one owner per resource, channels between them):
//! - the *audio thread* owns the [`Capture`] and the [`Listener`]; it never waits on
//!   anything but the microphone, so the wake word is heard even while a reply is
//!   being worked out or spoken;
//! - the *conversation task* receives what was heard and runs one [`Pipeline::respond`]
//!   at a time as its own task, so a wake word during a turn can abort it (barge-in)
//!   or, with `wake.interrupt = false`, queue the next command behind it. Aborting the
//!   task is the one way a turn is stopped (barge-in, shutdown); the agent turns that
//!   into cancelling the sandbox run on its blocking thread, see [`crate::agent`];
//! - the [`Speaker`] thread synthesises and plays sentences as they stream.
//!
//! [`Pipeline`] is the part `listen FILE.wav` shares: one command from audio to reply.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::listener::{Command, Heard, Listener};
use super::systemd::{Heartbeat, Notifier};
use crate::agent::{Agent, Session, TurnEvent};
use crate::audio::cues::Cue;
use crate::audio::{Capture, CaptureStatus, SAMPLE_RATE};
use crate::stt::Transcriber;
use crate::tts::Speaker;

/// Longest a reply may keep playing before the turn stops waiting for it.
const SPEAKING_LIMIT: Duration = Duration::from_secs(120);

/// What is needed to answer one spoken command.
pub struct Pipeline {
    transcriber: Arc<Transcriber>,
    agent: Agent,
    session: tokio::sync::Mutex<Session>,
    speaker: Arc<Speaker>,
    stop_phrases: Vec<String>,
}

/// A stage of answering a command, as it happens (for logs and `listen`).
#[derive(Debug)]
pub enum Step<'a> {
    /// Whisper's transcript (cleaned) and how long it took.
    Transcribed {
        /// The words; empty when nothing intelligible was said.
        text: &'a str,
        /// Time in whisper.cpp.
        took: Duration,
    },
    /// Speech to text failed.
    SttFailed(&'a str),
    /// The command was a stop phrase: speech stopped, the model was not asked.
    Stopped,
    /// Something the conversation turn produced.
    Turn(&'a TurnEvent),
    /// The first sample of the reply went out: `after` the last sample of speech.
    FirstAudio {
        /// Latency from the end of the user's speech.
        after: Duration,
    },
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcome {
    /// The turn succeeded (or was a stop phrase).
    pub ok: bool,
    /// The reply ended with a question: listen for the answer without the wake word.
    pub asked: bool,
}

/// Where a [`Step`] goes.
pub type Reporter = dyn Fn(Step<'_>) + Send + Sync;

impl Pipeline {
    /// Puts the parts together. `stop_phrases` are compared as [`normalize`] leaves them.
    pub fn new(
        transcriber: Arc<Transcriber>,
        agent: Agent,
        speaker: Arc<Speaker>,
        stop_phrases: &[String],
    ) -> Pipeline {
        let session = tokio::sync::Mutex::new(agent.session());
        Pipeline {
            transcriber,
            agent,
            session,
            speaker,
            stop_phrases: stop_phrases.iter().map(|p| normalize(p)).collect(),
        }
    }

    /// The speaker replies go to.
    pub fn speaker(&self) -> &Arc<Speaker> {
        &self.speaker
    }

    /// Answers one command: transcribe, run the turn with sentences spoken as they
    /// stream, wait for the speech to end. `heard_at` is when the end of speech was
    /// decided, for the latency figure.
    pub async fn respond(&self, command: Command, heard_at: Instant, report: &Reporter) -> Outcome {
        // The hangover passed in audio time before `heard_at` (counted for the latency
        // figure); the audio itself moves to the transcription thread.
        let hangover = (command.decided_at - command.end) as f64 / f64::from(SAMPLE_RATE);
        let samples = command.samples;
        let stt = self.transcriber.clone();
        let transcript = tokio::task::spawn_blocking(move || stt.transcribe(&samples)).await;
        let transcript = match transcript {
            Ok(Ok(transcript)) => transcript,
            Ok(Err(error)) => return self.failed(&error.to_string(), report),
            Err(error) => return self.failed(&format!("speech to text stopped: {error}"), report),
        };
        let text = clean_transcript(&transcript.text);
        report(Step::Transcribed {
            text: &text,
            took: transcript.inference,
        });
        if text.is_empty() {
            self.speaker.cue(Cue::Error);
            return Outcome::default();
        }
        if self.stop_phrases.contains(&normalize(&text)) {
            self.speaker.stop();
            self.speaker.cue(Cue::Done);
            report(Step::Stopped);
            return Outcome {
                ok: true,
                asked: false,
            };
        }
        self.speaker.output().mark();
        let (ok, last) = self.turn(&text, report).await;
        let speaker = self.speaker.clone();
        let _ = tokio::task::spawn_blocking(move || speaker.wait_done(SPEAKING_LIMIT)).await;
        if let Some(first) = self.speaker.output().first_audio() {
            let after =
                first.saturating_duration_since(heard_at) + Duration::from_secs_f64(hangover);
            report(Step::FirstAudio { after });
        }
        Outcome {
            ok,
            asked: last.is_some_and(|s| s.trim_end().ends_with('?')),
        }
    }

    /// Runs the conversation turn; returns whether it succeeded and the last sentence.
    async fn turn(&self, text: &str, report: &Reporter) -> (bool, Option<String>) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut session = self.session.lock().await;
        let run = self.agent.turn(&mut session, text, &tx);
        tokio::pin!(run);
        let mut result = None;
        let mut last = None;
        let mut spoke = false;
        loop {
            tokio::select! {
                done = &mut run, if result.is_none() => result = Some(done.is_ok()),
                event = rx.recv() => match event {
                    Some(event) => {
                        spoke |= self.speak(&event, &mut last);
                        report(Step::Turn(&event));
                    }
                    None => break,
                },
            }
            if result.is_some() && rx.is_empty() {
                break;
            }
        }
        let ok = result.unwrap_or(false);
        if ok && !spoke {
            self.speaker.cue(Cue::Done);
        }
        (ok, last)
    }

    /// What one turn event sounds like; true when something was said.
    fn speak(&self, event: &TurnEvent, last: &mut Option<String>) -> bool {
        match event {
            TurnEvent::Sentence(sentence) => {
                self.speaker.say(sentence);
                *last = Some(sentence.clone());
                true
            }
            TurnEvent::Confirm { call, .. } => {
                // Dropping the reply sender (when the event is dropped) is "no".
                tracing::warn!(%call, "a skill asked for confirmation, which cannot be given by voice yet; refused");
                self.speaker
                    .say("That needs a confirmation I can't take by voice, so I didn't do it.");
                true
            }
            TurnEvent::Error(_) => {
                self.speaker.cue(Cue::Error);
                self.speaker.say("Sorry, that didn't work.");
                true
            }
            TurnEvent::Code(_) | TurnEvent::CodeResult { .. } | TurnEvent::Notice(_) => false,
        }
    }

    fn failed(&self, error: &str, report: &Reporter) -> Outcome {
        report(Step::SttFailed(error));
        self.speaker.cue(Cue::Error);
        Outcome::default()
    }
}

/// Whisper marks non-speech as `[BLANK_AUDIO]`, `(wind blowing)`, `[Music]`: those
/// are not words. Returns the transcript without them, or empty.
pub fn clean_transcript(text: &str) -> String {
    let mut out = String::new();
    let mut depth = 0u32;
    for c in text.chars() {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    let out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    if out.chars().any(char::is_alphanumeric) {
        out
    } else {
        String::new()
    }
}

/// Lowercase words without punctuation, for comparing with stop phrases.
pub fn normalize(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '\'' {
                c
            } else {
                ' '
            }
        })
        .collect::<String>()
        .split_whitespace()
        .filter(|w| *w != "please")
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the voice loop is told by the conversation task.
enum Control {
    /// Listen for a command without the wake word, for this many milliseconds.
    Listen(u64),
}

/// How the loop behaves around a turn.
#[derive(Debug, Clone, Copy)]
pub struct VoiceSettings {
    /// A wake word during a turn aborts it; otherwise the next command waits.
    pub interrupt: bool,
    /// Follow-up listening after a question (0: off).
    pub follow_up_ms: u64,
}

/// The running voice loop.
pub struct Voice {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    audio: Option<std::thread::JoinHandle<()>>,
    /// Beats while the audio thread runs.
    pub audio_beat: Heartbeat,
    /// Beats while the conversation task runs and no turn is stuck.
    pub turn_beat: Heartbeat,
}

/// The status line systemd shows, derived from where the loop is.
fn capture_note(status: &CaptureStatus) -> Option<String> {
    match status {
        CaptureStatus::Retrying { error, .. } => {
            Some(format!("Microphone unavailable, retrying: {error}"))
        }
        CaptureStatus::Starting => Some("Opening the microphone".into()),
        CaptureStatus::Running { .. } => None,
    }
}

impl Voice {
    /// Starts the audio thread and the conversation task (on the current runtime).
    pub fn start(
        pipeline: Arc<Pipeline>,
        capture: Capture,
        listener: Listener,
        settings: VoiceSettings,
        notifier: Arc<Notifier>,
        wake_name: String,
    ) -> std::io::Result<Voice> {
        let (stop, stop_rx) = watch::channel(false);
        let (heard_tx, heard_rx) = mpsc::unbounded_channel();
        let (control_tx, control_rx) = std::sync::mpsc::channel();
        let audio_beat = Heartbeat::new();
        let turn_beat = Heartbeat::new();
        let capture_status = Arc::new(Mutex::new(CaptureStatus::Starting));
        let audio = AudioLoop {
            capture,
            listener,
            heard: heard_tx,
            control: control_rx,
            stop: stop_rx.clone(),
            beat: audio_beat.clone(),
            status: capture_status.clone(),
        };
        let audio = std::thread::Builder::new()
            .name("voice-audio".into())
            .spawn(move || audio.run())?;
        let conversation = Conversation {
            pipeline,
            settings,
            heard: heard_rx,
            control: control_tx,
            stop: stop_rx,
            beat: turn_beat.clone(),
            notifier,
            capture_status,
            idle_status: format!("Listening for \"{wake_name}\""),
            shown: String::new(),
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

    /// Stops the loop: the turn in progress is abandoned, speech stops, the
    /// microphone closes.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        let _ = (&mut self.task).await;
        if let Some(audio) = self.audio.take() {
            let _ = tokio::task::spawn_blocking(move || audio.join()).await;
        }
    }
}

struct AudioLoop {
    capture: Capture,
    listener: Listener,
    heard: mpsc::UnboundedSender<(Heard, Instant)>,
    control: Receiver<Control>,
    stop: watch::Receiver<bool>,
    beat: Heartbeat,
    status: Arc<Mutex<CaptureStatus>>,
}

impl AudioLoop {
    fn run(mut self) {
        let mut status_at = Instant::now();
        while !*self.stop.borrow() {
            self.beat.beat();
            while let Ok(Control::Listen(ms)) = self.control.try_recv() {
                self.listener.listen(ms);
            }
            match self
                .capture
                .frames()
                .recv_timeout(Duration::from_millis(100))
            {
                Ok(frame) => {
                    if let Some(heard) = self.listener.push(&frame)
                        && self.heard.send((heard, Instant::now())).is_err()
                    {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if status_at.elapsed() >= Duration::from_millis(500) {
                status_at = Instant::now();
                *self.status.lock().unwrap_or_else(|e| e.into_inner()) = self.capture.status();
            }
        }
    }
}

struct Conversation {
    pipeline: Arc<Pipeline>,
    settings: VoiceSettings,
    heard: mpsc::UnboundedReceiver<(Heard, Instant)>,
    control: Sender<Control>,
    stop: watch::Receiver<bool>,
    beat: Heartbeat,
    notifier: Arc<Notifier>,
    capture_status: Arc<Mutex<CaptureStatus>>,
    idle_status: String,
    /// The status last sent, so each change is sent (and logged) once.
    shown: String,
}

/// A turn in progress.
struct Turn {
    task: JoinHandle<Outcome>,
    started: Instant,
}

/// A turn running longer than this is stuck: the watchdog stops being fed.
const TURN_STUCK: Duration = Duration::from_secs(300);

static COMMAND_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Conversation {
    fn show(&mut self, status: &str) {
        if self.shown != status {
            tracing::debug!(status, "state");
            self.notifier.status(status);
            self.shown = status.to_string();
        }
    }

    fn spawn_turn(&self, command: Command, heard_at: Instant) -> Turn {
        let pipeline = self.pipeline.clone();
        let id = COMMAND_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let span = tracing::info_span!("command", id);
        let secs = |at: u64| at as f64 / f64::from(SAMPLE_RATE);
        tracing::info!(parent: &span, speech_s = format!("{:.2}-{:.2}", secs(command.start), secs(command.end)), cut = command.cut, "command heard");
        let task = tokio::spawn(
            async move { pipeline.respond(command, heard_at, &log_step).await }.instrument(span),
        );
        Turn {
            task,
            started: Instant::now(),
        }
    }

    async fn run(mut self) {
        let idle = self.idle_status.clone();
        self.show(&idle);
        let mut turn: Option<Turn> = None;
        let mut queued: Option<(Command, Instant)> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = self.stop.changed() => break,
                heard = self.heard.recv() => {
                    let Some((heard, at)) = heard else { break };
                    match heard {
                        Heard::Woke(detection) => {
                            let busy = turn.is_some() || self.pipeline.speaker().busy();
                            tracing::info!(word = %detection.name, score = format!("{:.2}", detection.score), busy, "wake word");
                            if busy && self.settings.interrupt {
                                if let Some(t) = turn.take() {
                                    t.task.abort();
                                }
                                self.pipeline.speaker().stop();
                                tracing::info!("interrupted: listening for a new command");
                            }
                            self.pipeline.speaker().cue(Cue::Woke);
                            self.show("Listening to a command");
                        }
                        Heard::Command(command) => {
                            if turn.is_some() {
                                tracing::info!("a command came during a reply: it waits for the reply to finish");
                                queued = Some((command, at));
                            } else {
                                turn = Some(self.spawn_turn(command, at));
                                self.show("Answering");
                            }
                        }
                        Heard::NoSpeech { .. } => {
                            tracing::info!("no command followed; waiting for the wake word");
                            self.pipeline.speaker().cue(Cue::Done);
                            self.show(&idle);
                        }
                    }
                }
                outcome = async { turn.as_mut().map(|t| &mut t.task).expect("guarded").await }, if turn.is_some() => {
                    turn = None;
                    release_memory();
                    match outcome {
                        Ok(outcome) if outcome.asked && self.settings.follow_up_ms > 0 && queued.is_none() => {
                            let _ = self.control.send(Control::Listen(self.settings.follow_up_ms));
                            self.show("Listening for an answer");
                        }
                        Ok(_) => self.show(&idle),
                        Err(error) if error.is_cancelled() => self.show(&idle),
                        Err(error) => {
                            tracing::error!("the turn stopped unexpectedly: {error}");
                            self.pipeline.speaker().cue(Cue::Error);
                            self.show(&idle);
                        }
                    }
                    if let Some((command, at)) = queued.take() {
                        turn = Some(self.spawn_turn(command, at));
                        self.show("Answering");
                    }
                }
                _ = tick.tick() => {
                    if turn.as_ref().is_none_or(|t| t.started.elapsed() < TURN_STUCK) {
                        self.beat.beat();
                    }
                    let note = capture_note(&self.capture_status.lock().unwrap_or_else(|e| e.into_inner()));
                    match note {
                        Some(note) => self.show(&note),
                        None if self.shown.starts_with("Microphone") || self.shown.starts_with("Opening") => self.show(&idle),
                        None => {}
                    }
                }
            }
        }
        if let Some(t) = turn {
            t.task.abort();
        }
        self.pipeline.speaker().stop();
    }
}

/// Hands memory freed by the turn (whisper's buffers, the reply's audio) back to the
/// system. glibc keeps freed memory in per-thread arenas; without this an idle spoke
/// sits ~25 MB above its start-up size after the first command.
fn release_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// How `run` logs each stage (journald gets one line per stage, inside the command's span).
fn log_step(step: Step<'_>) {
    match step {
        Step::Transcribed { text, took } => {
            tracing::info!(stt_ms = took.as_millis() as u64, %text, "transcript");
        }
        Step::SttFailed(error) => tracing::error!("speech to text failed: {error}"),
        Step::Stopped => tracing::info!("stop phrase: speech stopped"),
        Step::Turn(event) => match event {
            TurnEvent::Sentence(s) => tracing::info!(sentence = %s, "reply"),
            TurnEvent::Code(code) => tracing::debug!(%code, "running model code"),
            TurnEvent::CodeResult { result, .. } => match result {
                Ok(value) => tracing::debug!(%value, "code result"),
                Err(error) => tracing::info!(%error, "code failed"),
            },
            TurnEvent::Notice(n) => tracing::info!("{n}"),
            TurnEvent::Error(e) => tracing::warn!("turn failed: {e}"),
            TurnEvent::Confirm { .. } => {}
        },
        Step::FirstAudio { after } => tracing::info!(
            latency_ms = after.as_millis() as u64,
            "first audio of the reply (after the end of speech)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_speech_marks_are_not_words() {
        assert_eq!(clean_transcript(" [BLANK_AUDIO] "), "");
        assert_eq!(clean_transcript("(wind blowing)"), "");
        assert_eq!(clean_transcript("..."), "");
        assert_eq!(
            clean_transcript(" Turn on the light. [Music]"),
            "Turn on the light."
        );
    }

    #[test]
    fn stop_phrases_match_without_case_punctuation_or_please() {
        assert_eq!(normalize("Stop!"), "stop");
        assert_eq!(normalize("Never mind, please."), "never mind");
        assert_eq!(normalize("Don't stop"), "don't stop");
    }
}
