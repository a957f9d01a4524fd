//! The conversation task: what the audio thread heard becomes turns, answers, rings
//! and rounds with other spokes, one turn at a time.
//!
//! It owns everything that changes between utterances (the turn in progress, a command
//! queued behind it, a question's open answer, a ring, a round, speech waiting to be
//! said) and is the only place that tells the audio thread what to listen for. Each
//! decision is made by [`super::routing`] over a snapshot of that state; this file
//! carries the decisions out. A turn is stopped (barge-in, shutdown) by cancelling its
//! token, a child of the loop's: its task then drops the turn, which cancels the
//! transcription and the sandbox run on their blocking threads (see [`crate::agent`]).
//! Every task it starts is awaited before it ends.

use std::collections::VecDeque;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::arbiter::{Arbiter, Round, next_claim};
use super::audio_loop::Control;
use super::listener::{Command, Guess, Heard};
use super::pipeline::{Outcome, Pipeline, Step, clean_transcript};
use super::ringing::{RingStep, Ringing};
use super::routing::{self, AfterTurn, Delivery, Ended, Route, Situation};
use super::systemd::{Heartbeat, Notifier};
use super::turn_end;
use crate::agent::TurnEvent;
use crate::audio::cues::Cue;
use crate::audio::{CaptureStatus, SAMPLE_RATE};
use crate::deadline::Cancel;
use crate::host::spoken::Spoken;
use crate::stt::Transcript;
use crate::wake::Detection;

/// How the loop behaves around a turn.
#[derive(Debug, Clone, Copy)]
pub struct VoiceSettings {
    /// A wake word during a turn aborts it; otherwise the next command waits.
    pub interrupt: bool,
    /// Follow-up listening after a question (0: off).
    pub follow_up_ms: u64,
    /// How long to wait for a yes or no after asking to confirm a call.
    pub confirm_ms: u64,
    /// How long a due timer rings unless stopped.
    pub ring_ms: u64,
    /// How long to agree with other spokes on who answers a wake word (0: off).
    pub arbitration_ms: u64,
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

pub(super) struct Conversation {
    pub(super) pipeline: Arc<Pipeline>,
    pub(super) settings: VoiceSettings,
    pub(super) heard: mpsc::UnboundedReceiver<(Heard, Instant)>,
    pub(super) control: Sender<Control>,
    /// A turn asking for the answer to its question.
    pub(super) asks: mpsc::UnboundedReceiver<oneshot::Sender<Option<Command>>>,
    /// Where the next command (or silence) goes instead of starting a turn.
    pub(super) answer: Option<oneshot::Sender<Option<Command>>>,
    /// Cancelled when the loop stops; turns and transcriptions hang from it.
    pub(super) stop: CancellationToken,
    /// Stopped turns and pause transcriptions still ending: awaited before the task ends.
    pub(super) ending: JoinSet<()>,
    pub(super) beat: Heartbeat,
    pub(super) notifier: Arc<Notifier>,
    pub(super) capture_status: Arc<Mutex<CaptureStatus>>,
    pub(super) idle_status: String,
    /// The status last sent, so each change is sent (and logged) once.
    pub(super) shown: String,
    /// Speech from skills and due timers.
    pub(super) spoken: mpsc::Receiver<Spoken>,
    /// What came from `spoken` and waits for the turn (or the listening) to end.
    pub(super) later: VecDeque<Spoken>,
    /// A due timer ringing.
    pub(super) ringing: Option<Ringing>,
    /// A command is being listened to (after the wake word, or in a follow-up window).
    pub(super) listening: bool,
    /// Agreeing with other spokes on who answers; none when alone or turned off.
    pub(super) arbiter: Option<Arbiter>,
    /// A wake word heard here, waiting for the other spokes' claims.
    pub(super) round: Option<Round>,
    /// Lost a round to a spoke that heard the wake word ending here: the command
    /// captured after it is dropped if it still arrives.
    pub(super) lost_from: Option<u64>,
    /// Commands so far whose speaker paused, to be judged finished or not.
    pub(super) paused: mpsc::UnboundedReceiver<Command>,
    /// Transcripts of paused commands, judged finished or not, as they are made.
    pub(super) judged: mpsc::UnboundedReceiver<(u64, Option<Transcript>)>,
    pub(super) judged_tx: mpsc::UnboundedSender<(u64, Option<Transcript>)>,
    /// A paused command is being transcribed: where its speech ended.
    pub(super) judging: Option<u64>,
    /// The command that paused there ended before its transcript was ready: it waits
    /// for it rather than being transcribed twice.
    pub(super) waiting: Option<(Command, Instant)>,
    /// A later pause, judged when the transcription in progress ends.
    pub(super) next_pause: Option<Command>,
    /// The last paused command's transcript, for the command it turns out to be.
    pub(super) guess: Guess,
}

async fn sleep_until_some(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at.into()).await;
    }
}

/// A turn in progress.
struct Turn {
    /// Its result; `None` when it was stopped.
    task: JoinHandle<Option<Outcome>>,
    /// Stops it.
    stop: CancellationToken,
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
        let stop = self.stop.child_token();
        let stopped = stop.clone();
        let task = tokio::spawn(
            async move {
                tokio::select! {
                    _ = stopped.cancelled() => None,
                    outcome = pipeline.respond(command, heard_at, &log_step) => Some(outcome),
                }
            }
            .instrument(span),
        );
        Turn {
            task,
            stop,
            started: Instant::now(),
        }
    }

    /// Stops `turn`; it ends in the background and is awaited before the loop ends.
    fn stop_turn(&mut self, turn: Turn) {
        turn.stop.cancel();
        let task = turn.task;
        self.ending.spawn(async move {
            let _ = task.await;
        });
    }

    /// A turn wants the answer to its question: listen without the wake word.
    fn listen_for_answer(&mut self, reply: oneshot::Sender<Option<Command>>) {
        self.stop_ringing("a question is asked");
        self.answer = Some(reply);
        let _ = self.control.send(Control::Listen(self.settings.confirm_ms));
        self.show("Listening for yes or no");
    }

    /// Where the conversation stands, for [`routing`]'s decisions.
    fn situation(&self, turn: bool) -> Situation {
        Situation {
            listening: self.listening,
            asked: self.answer.is_some(),
            asker_waits: self.answer.as_ref().is_some_and(|reply| !reply.is_closed()),
            round: self.round.is_some(),
            ringing: self.ringing.is_some(),
            turn,
            lost_from: self.lost_from,
        }
    }

    /// Says or rings what waits in `later`, unless a turn runs or someone is being
    /// listened to. While ringing, only more due timers join in; the rest waits.
    fn deliver(&mut self, turn_running: bool) {
        if !routing::may_deliver(&self.situation(turn_running)) {
            return;
        }
        let speaker = self.pipeline.speaker().clone();
        for delivery in routing::deliveries(&mut self.later, self.ringing.is_some()) {
            match delivery {
                Delivery::SayStale { skill, line } => {
                    tracing::info!(%skill, "came due long ago; said, not rung");
                    speaker.say(&line);
                }
                Delivery::Ring(line) => self.ring(line),
                Delivery::Say(text) => speaker.say(&text),
                Delivery::Cue(cue) => speaker.cue(cue),
                Delivery::Announce(text) => {
                    tracing::info!(%text, "announcement");
                    speaker.cue(Cue::Chime);
                    speaker.say(&text);
                }
            }
        }
    }

    /// Starts ringing `line`, or adds it to the ring in progress.
    fn ring(&mut self, line: String) {
        if let Some(ringing) = &mut self.ringing {
            ringing.add(line);
            return;
        }
        self.show(&format!("Ringing: {line}"));
        let length = Duration::from_millis(self.settings.ring_ms);
        self.ringing = Some(Ringing::new(line, Instant::now(), length));
        self.play_ring();
        let _ = self
            .control
            .send(Control::ListenOverRing(self.settings.ring_ms));
    }

    fn play_ring(&mut self) {
        let Some(ringing) = &mut self.ringing else {
            return;
        };
        let (lines, rings) = ringing.rang();
        if rings > 1 {
            tracing::info!(ring = rings, "ringing again");
        }
        let speaker = self.pipeline.speaker();
        speaker.cue(Cue::Ring);
        for line in lines {
            speaker.say(line);
        }
    }

    /// Keeps a ring going: again after a quiet gap; ends it at its time.
    fn keep_ringing(&mut self) {
        let playing = self.pipeline.speaker().busy();
        let Some(ringing) = &mut self.ringing else {
            return;
        };
        match ringing.tick(Instant::now(), playing) {
            RingStep::Wait => {}
            RingStep::Again => self.play_ring(),
            RingStep::Over => {
                self.stop_ringing("nobody stopped it within timers.ring_ms");
                let _ = self.control.send(Control::Cancel);
                let idle = self.idle_status.clone();
                self.show(&idle);
            }
        }
    }

    /// After an utterance (while it is checked for "stop") or silence, listen again for
    /// the rest of the ring.
    fn listen_while_ringing(&mut self) {
        if let Some(left) = self
            .ringing
            .as_ref()
            .and_then(|ringing| ringing.window_left(Instant::now()))
        {
            let _ = self
                .control
                .send(Control::ListenOverRing(left.as_millis() as u64));
        }
    }

    /// Someone said "stop" over the ring: it stops, the window over it closes, and what
    /// waited for the ring is delivered.
    fn stopped_by_voice(&mut self, why: &str, turn_runs: bool) {
        if self.ringing.is_none() {
            return;
        }
        self.stop_ringing(why);
        let _ = self.control.send(Control::Cancel);
        self.pipeline.speaker().cue(Cue::Done);
        let idle = self.idle_status.clone();
        self.show(&idle);
        self.deliver(turn_runs);
    }

    fn stop_ringing(&mut self, why: &str) {
        if let Some(ringing) = self.ringing.take() {
            tracing::info!(lines = ?ringing.lines(), "ringing stopped: {why}");
            self.pipeline.speaker().stop();
        }
    }

    /// What the listener completed: an answer, a stop while ringing, a wake word (maybe
    /// to agree on with other spokes first), a command, or nothing said; where it goes is
    /// [`routing::route`]'s decision.
    fn on_heard(
        &mut self,
        heard: Heard,
        at: Instant,
        turn: &mut Option<Turn>,
        queued: &mut Option<(Command, Instant)>,
        stop_checks: &mut JoinSet<bool>,
    ) {
        let heard = match self.guess.attach(heard) {
            // Its transcript is being made: wait for it instead of making another.
            Heard::Command(command)
                if command.transcript.is_none() && self.judging == Some(command.end) =>
            {
                self.waiting = Some((command, at));
                return;
            }
            heard => heard,
        };
        let route = routing::route(&self.situation(turn.is_some()), heard);
        self.lost_from = None;
        // The question's answer is this, or (when the wake word came instead) none.
        let reply = self.answer.take().filter(|reply| !reply.is_closed());
        match route {
            Route::Drop => tracing::debug!("dropped what was heard after losing the round"),
            Route::Answer(command) => {
                if let Some(reply) = reply {
                    let _ = reply.send(command);
                }
                self.show("Answering");
            }
            Route::Hold(heard) => {
                if let Some(round) = &mut self.round {
                    round.held.push((heard, at));
                }
            }
            Route::CheckStop(command) => {
                let pipeline = self.pipeline.clone();
                let stopped = self.stop.clone();
                stop_checks.spawn(async move {
                    tokio::select! {
                        _ = stopped.cancelled() => false,
                        said = pipeline.says_stop(command) => said,
                    }
                });
                // A "stop" said while this is transcribed is heard too.
                self.listen_while_ringing();
            }
            Route::ListenOn => self.listen_while_ringing(),
            Route::StopRing => self.stopped_by_voice("stop word", turn.is_some()),
            Route::Hush => {
                if self.ringing.is_some() && self.pipeline.speaker().busy() {
                    tracing::info!("someone speaks over the ring: it makes way");
                    self.pipeline.speaker().stop();
                }
            }
            Route::Wake {
                detection,
                stop_ringing,
            } => {
                if stop_ringing {
                    self.stop_ringing("wake word");
                }
                if !self.open_round(&detection, self.busy(turn)) {
                    self.woke(&detection, turn);
                }
            }
            Route::Queue(command) => {
                self.listening = false;
                tracing::info!("a command came during a reply: it waits for the reply to finish");
                *queued = Some((command, at));
            }
            Route::Start(command) => {
                self.listening = false;
                *turn = Some(self.spawn_turn(command, at));
                self.show("Answering");
            }
            Route::Idle => {
                self.listening = false;
                tracing::info!("no command followed; waiting for the wake word");
                self.pipeline.speaker().cue(Cue::Done);
                let idle = self.idle_status.clone();
                self.show(&idle);
                self.deliver(turn.is_some());
            }
        }
    }

    /// Transcribes a paused command to hear whether it sounds finished (one at a
    /// time: a pause that comes meanwhile waits, replacing any older one).
    fn judge(&mut self, command: Command) {
        if self.judging.is_some() {
            self.next_pause = Some(command);
            return;
        }
        self.judging = Some(command.end);
        let stt = self.pipeline.transcriber().clone();
        let done = self.judged_tx.clone();
        let cancel = Cancel::child_of(&self.stop);
        self.ending.spawn_blocking(move || {
            // Always answered, even if whisper panics: the loop waits for it.
            let transcript = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                stt.transcribe_cancellable(&command.samples, &cancel)
            }));
            let transcript = match transcript {
                Ok(Ok(transcript)) => Some(transcript),
                Ok(Err(error)) => {
                    tracing::warn!("speech to text failed on a pause: {error}");
                    None
                }
                Err(_) => {
                    tracing::error!("speech to text panicked on a pause");
                    None
                }
            };
            let _ = done.send((command.end, transcript));
        });
    }

    /// A paused command's transcript: end the command there when it sounds finished.
    /// Returns the command that was waiting for it, now with its transcript.
    fn judged(&mut self, end: u64, transcript: Option<Transcript>) -> Option<(Heard, Instant)> {
        self.judging = None;
        if let Some(transcript) = transcript {
            let text = clean_transcript(&transcript.text);
            let finished = turn_end::sounds_finished(&text, transcript.last_word_probability);
            tracing::debug!(%text, finished, "the speaker paused");
            if finished {
                let _ = self.control.send(Control::Finish(end));
            }
            self.guess.keep(end, transcript);
        }
        if let Some(next) = self.next_pause.take() {
            self.judge(next);
        }
        let (command, at) = self.waiting.take()?;
        Some((self.guess.attach(Heard::Command(command)), at))
    }

    /// Whether the spoke is answering or talking.
    fn busy(&self, turn: &Option<Turn>) -> bool {
        turn.is_some() || self.pipeline.speaker().busy()
    }

    /// This spoke answers the wake word: interrupt what it was doing, listen.
    fn woke(&mut self, detection: &Detection, turn: &mut Option<Turn>) {
        self.listening = true;
        let busy = self.busy(turn);
        tracing::info!(word = %detection.name, score = format!("{:.2}", detection.score), proximity_db = format!("{:.1}", detection.proximity_db), busy, "wake word");
        if busy && self.settings.interrupt {
            if let Some(t) = turn.take() {
                self.stop_turn(t);
            }
            self.pipeline.speaker().stop();
            tracing::info!("interrupted: listening for a new command");
        }
        self.pipeline.speaker().cue(Cue::Woke);
        self.show("Listening to a command");
    }

    /// With other spokes online, tells them about the wake word and waits for the
    /// window before acting on it (the command is captured meanwhile). False when this
    /// spoke answers at once: arbitration is off, nobody else is online, the broker
    /// is unreachable.
    fn open_round(&mut self, detection: &Detection, busy: bool) -> bool {
        let Some(arbiter) = &mut self.arbiter else {
            return false;
        };
        self.round = arbiter.open(detection, busy);
        self.round.is_some()
    }

    /// The window is over: answer (returning what was heard meanwhile) or, when
    /// another spoke heard it better, drop it all quietly.
    fn decide(&mut self, turn: &mut Option<Turn>) -> Vec<(Heard, Instant)> {
        let (Some(round), Some(arbiter)) = (self.round.take(), &self.arbiter) else {
            return Vec::new();
        };
        match arbiter.winner(&round) {
            None => {
                tracing::info!(
                    proximity_db = format!("{:.1}", round.claim.proximity_db),
                    "this spoke heard the wake word best: answering"
                );
                // Acted on here, not replayed: a replayed wake word would open a round.
                self.woke(&round.detection, turn);
                round.held
            }
            Some((winner, why)) => {
                tracing::info!(
                    %winner,
                    proximity_db = format!("{:.1}", round.claim.proximity_db),
                    "another spoke answers: {why}"
                );
                // The capture may end before the cancel reaches it (or be waiting
                // for its transcript): what it delivers is not this spoke's to answer.
                self.lost_from = Some(round.detection.end);
                if self
                    .waiting
                    .as_ref()
                    .is_some_and(|(c, _)| c.start >= round.detection.end)
                {
                    self.waiting = None;
                }
                // The command was being captured: drop it unless it already ended.
                if !round.held.iter().any(|(h, _)| !matches!(h, Heard::Woke(_))) {
                    let _ = self.control.send(Control::Cancel);
                }
                Vec::new()
            }
        }
    }

    pub(super) async fn run(mut self) {
        let idle = self.idle_status.clone();
        self.show(&idle);
        let mut turn: Option<Turn> = None;
        let mut queued: Option<(Command, Instant)> = None;
        // Transcribing what was heard while ringing, to see whether it was "stop".
        let mut stop_checks: JoinSet<bool> = JoinSet::new();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            let round_ends = self.round.as_ref().map(|r| r.decide_at);
            tokio::select! {
                _ = self.stop.cancelled() => break,
                Some(reply) = self.asks.recv() => self.listen_for_answer(reply),
                Some(item) = self.spoken.recv() => {
                    self.later.push_back(item);
                    self.deliver(turn.is_some());
                }
                Some(said_stop) = stop_checks.join_next(), if !stop_checks.is_empty() => {
                    if said_stop.unwrap_or(false) {
                        self.stopped_by_voice("stop phrase", turn.is_some());
                    }
                }
                heard = self.heard.recv() => {
                    let Some((heard, at)) = heard else { break };
                    self.on_heard(heard, at, &mut turn, &mut queued, &mut stop_checks);
                }
                Some(command) = self.paused.recv() => self.judge(command),
                Some((end, transcript)) = self.judged.recv() => {
                    if let Some((heard, at)) = self.judged(end, transcript) {
                        self.on_heard(heard, at, &mut turn, &mut queued, &mut stop_checks);
                    }
                }
                Some(claim) = next_claim(&mut self.arbiter) => {
                    if let Some(arbiter) = &mut self.arbiter {
                        arbiter.heard(claim);
                    }
                }
                _ = sleep_until_some(round_ends), if round_ends.is_some() => {
                    for (heard, at) in self.decide(&mut turn) {
                        self.on_heard(heard, at, &mut turn, &mut queued, &mut stop_checks);
                    }
                }
                outcome = async { turn.as_mut().map(|t| &mut t.task).expect("guarded").await }, if turn.is_some() => {
                    turn = None;
                    release_memory();
                    let ended = match outcome {
                        Ok(Some(outcome)) => Ended::Done(outcome),
                        Ok(None) => Ended::Cancelled,
                        Err(error) if error.is_cancelled() => Ended::Cancelled,
                        Err(error) => {
                            tracing::error!("the turn stopped unexpectedly: {error}");
                            Ended::Failed
                        }
                    };
                    let follow_up = self.settings.follow_up_ms > 0;
                    match routing::after_turn(ended, follow_up, queued.is_some(), self.round.is_some()) {
                        AfterTurn::FollowUp => {
                            self.listening = true;
                            let _ = self.control.send(Control::Listen(self.settings.follow_up_ms));
                            self.show("Listening for an answer");
                        }
                        AfterTurn::Idle => self.show(&idle),
                        AfterTurn::Broke => {
                            self.pipeline.speaker().cue(Cue::Error);
                            self.show(&idle);
                        }
                    }
                    if let Some((command, at)) = queued.take() {
                        turn = Some(self.spawn_turn(command, at));
                        self.show("Answering");
                    }
                    self.deliver(turn.is_some());
                }
                _ = tick.tick() => {
                    if turn.as_ref().is_none_or(|t| t.started.elapsed() < TURN_STUCK) {
                        self.beat.beat();
                    }
                    self.keep_ringing();
                    while self.ending.try_join_next().is_some() {}
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
            self.stop_turn(t);
        }
        while stop_checks.join_next().await.is_some() {}
        self.pipeline.speaker().stop();
        while self.ending.join_next().await.is_some() {}
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
        Step::Transcribed {
            text,
            took,
            language,
        } => {
            tracing::info!(stt_ms = took.as_millis() as u64, language, %text, "transcript");
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
            TurnEvent::Confirm { call, .. } => tracing::info!(%call, "asking to confirm"),
        },
        Step::Asked { question } => tracing::info!(%question, "asked"),
        Step::Answered { text, answer } => {
            tracing::info!(%text, answer = answer.as_str(), "answer heard")
        }
        Step::FirstAudio { after } => tracing::info!(
            latency_ms = after.as_millis() as u64,
            "first audio of the reply (after the end of speech)"
        ),
    }
}
