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
//! every [`RING_GAP`] after they end, while a listening window without the wake word
//! stays open; "stop" (or the wake word) ends it, or `timers.ring_ms` does.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::answer::{self, Answer};
use super::listener::{Command, Guess, Heard, Listener};
use super::phrases::{self, Phrase};
use super::systemd::{Heartbeat, Notifier};
use super::turn_end;
use super::words::normalize;
use crate::agent::{Agent, Session, TurnEvent};
use crate::audio::cues::Cue;
use crate::audio::{Capture, CaptureStatus, SAMPLE_RATE};
use crate::host::schedule::Lateness;
use crate::host::spoken::Spoken;
use crate::mqtt::protocol::WakeClaim;
use crate::stt::{Transcriber, Transcript, Verdict};
use crate::tts::Speaker;
use crate::wake::Detection;

/// Longest a reply may keep playing before the turn stops waiting for it.
const SPEAKING_LIMIT: Duration = Duration::from_secs(120);

/// Silence between two rings of a due timer.
pub const RING_GAP: Duration = Duration::from_secs(2);

/// What is needed to answer one spoken command.
pub struct Pipeline {
    transcriber: Arc<Transcriber>,
    agent: Agent,
    session: tokio::sync::Mutex<Session>,
    speaker: Arc<Speaker>,
    stop_phrases: Vec<String>,
    /// Where answers to confirmation questions come from; none: nobody can confirm.
    ear: std::sync::OnceLock<Arc<dyn Ear>>,
}

/// Where the answer to a question the spoke asked comes from: the next utterance,
/// heard without the wake word. `run` asks its audio thread; `listen` reads on in
/// the recording.
pub trait Ear: Send + Sync {
    /// Starts listening for the answer; the receiver gets the utterance, or `None` when
    /// nobody spoke within the window.
    fn next_utterance(&self) -> oneshot::Receiver<Option<Command>>;
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
        /// The language heard (`en`, `de`...).
        language: &'a str,
    },
    /// Speech to text failed.
    SttFailed(&'a str),
    /// The command was a stop phrase: speech stopped, the model was not asked.
    Stopped,
    /// Something the conversation turn produced.
    Turn(&'a TurnEvent),
    /// A `@confirm` call is asked about aloud.
    Asked {
        /// The question.
        question: &'a str,
    },
    /// The answer to [`Step::Asked`]: what was heard and what it meant.
    Answered {
        /// The transcript; empty when nobody spoke.
        text: &'a str,
        /// Yes, no or not understood.
        answer: Answer,
    },
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
            ear: std::sync::OnceLock::new(),
        }
    }

    /// Lets `@confirm` calls be asked about aloud, the answer coming from `ear`. Only
    /// the first ear given is used.
    pub fn set_ear(&self, ear: Arc<dyn Ear>) {
        if self.ear.set(ear).is_err() {
            tracing::warn!("the pipeline already has an ear; the new one is ignored");
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
        let transcript = match self.transcript(command).await {
            Ok(transcript) => transcript,
            Err(error) => return self.failed(&error, report),
        };
        let text = clean_transcript(&transcript.text);
        self.speaker.set_language(Some(transcript.language));
        report(Step::Transcribed {
            text: &text,
            took: transcript.inference,
            language: transcript.language,
        });
        if text.is_empty() {
            self.speaker.cue(Cue::Error);
            // Words were there but none passed the checks (a loop, or out of time):
            // say so, rather than act on them or leave the person waiting.
            if matches!(transcript.verdict, Verdict::Garbled | Verdict::TimedOut) {
                self.speaker.say(self.phrase(Phrase::DidntCatch));
            }
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
        let language = crate::stt::language_name(transcript.language);
        let (ok, last) = self.turn(&text, language.as_deref(), report).await;
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

    /// What `command` says: the transcript made while its speaker paused, or a new one.
    async fn transcript(&self, command: Command) -> Result<Transcript, String> {
        if let Some(transcript) = command.transcript {
            return Ok(transcript);
        }
        let stt = self.transcriber.clone();
        match tokio::task::spawn_blocking(move || stt.transcribe(&command.samples)).await {
            Ok(Ok(transcript)) => Ok(transcript),
            Ok(Err(error)) => Err(error.to_string()),
            Err(error) => Err(format!("speech to text stopped: {error}")),
        }
    }

    /// Runs the conversation turn on `text`, spoken in `language` (its name); returns
    /// whether it succeeded and the last sentence.
    async fn turn(
        &self,
        text: &str,
        language: Option<&str>,
        report: &Reporter,
    ) -> (bool, Option<String>) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut session = self.session.lock().await;
        let run = self.agent.turn_in(&mut session, text, language, &tx);
        tokio::pin!(run);
        let mut result = None;
        let mut last = None;
        let mut spoke = false;
        loop {
            tokio::select! {
                done = &mut run, if result.is_none() => result = Some(done.is_ok()),
                event = rx.recv() => match event {
                    Some(event @ TurnEvent::Confirm { .. }) => {
                        report(Step::Turn(&event));
                        if let TurnEvent::Confirm { question, mut reply, .. } = event {
                            // The run may stop waiting first (its time is up): then
                            // so does the question.
                            tokio::select! {
                                yes = self.confirm(&question, report) => {
                                    let _ = reply.send(yes);
                                }
                                _ = reply.closed() => {
                                    tracing::info!("the run stopped waiting for the answer");
                                }
                            }
                        }
                        spoke = true;
                    }
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
            // Asked in `turn`, which owns the reply.
            TurnEvent::Confirm { .. } => true,
            TurnEvent::Error(_) => {
                self.speaker.cue(Cue::Error);
                self.speaker.say(self.phrase(Phrase::DidntWork));
                true
            }
            TurnEvent::Code(_) | TurnEvent::CodeResult { .. } | TurnEvent::Notice(_) => false,
        }
    }

    /// Asks `question` aloud and listens for the answer; true on a clear yes. The
    /// question is spoken to the end before listening starts, so the spoke does not
    /// hear itself.
    async fn confirm(&self, question: &str, report: &Reporter) -> bool {
        let Some(ear) = self.ear.get().cloned() else {
            tracing::warn!(
                question,
                "a skill asked for confirmation and nobody can answer here; refused"
            );
            return false;
        };
        // The question is made of the skill's own words, in the person's language
        // where the spoke has a frame for it.
        let asked = match (
            crate::skills::policy::request_in(question),
            self.speaker.language(),
        ) {
            (Some(request), Some(language)) => phrases::confirm(request, language),
            _ => question.to_string(),
        };
        let question = asked.as_str();
        self.speaker.say(question);
        report(Step::Asked { question });
        let speaker = self.speaker.clone();
        let _ = tokio::task::spawn_blocking(move || speaker.wait_done(SPEAKING_LIMIT)).await;
        let heard = ear.next_utterance().await.ok().flatten();
        let text = match heard {
            Some(command) => match self.transcript(command).await {
                Ok(transcript) => clean_transcript(&transcript.text),
                Err(error) => {
                    tracing::error!("speech to text failed on the answer: {error}");
                    String::new()
                }
            },
            None => String::new(),
        };
        let answer = answer::judge(&text);
        report(Step::Answered {
            text: &text,
            answer,
        });
        answer.allows()
    }

    /// Whether `command` says a stop phrase (alone or among other words, such as the
    /// wake word said in the same breath): what ends a ringing timer.
    pub async fn says_stop(&self, command: Command) -> bool {
        let text = match self.transcript(command).await {
            Ok(transcript) => normalize(&clean_transcript(&transcript.text)),
            Err(_) => return false,
        };
        tracing::info!(%text, "heard while ringing");
        let words: Vec<&str> = text.split_whitespace().collect();
        self.stop_phrases.iter().any(|phrase| {
            let phrase: Vec<&str> = phrase.split_whitespace().collect();
            !phrase.is_empty() && words.windows(phrase.len()).any(|w| w == phrase.as_slice())
        })
    }

    fn failed(&self, error: &str, report: &Reporter) -> Outcome {
        report(Step::SttFailed(error));
        self.speaker.cue(Cue::Error);
        self.speaker.say(self.phrase(Phrase::DidntCatch));
        Outcome::default()
    }

    /// `phrase` in the language of the conversation.
    fn phrase(&self, phrase: Phrase) -> &'static str {
        phrases::say(phrase, self.speaker.language().unwrap_or("en"))
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

/// What the voice loop is told by the conversation task.
enum Control {
    /// Listen for a command without the wake word, for this many milliseconds.
    Listen(u64),
    /// Stop listening for a command; wait for the wake word.
    Cancel,
    /// The command paused at this stream position sounds finished.
    Finish(u64),
}

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

/// What the loop hears with: the microphone, the listener that finds the wake word and
/// the command in it, and the wake word's name (for the status line).
pub struct Ears {
    pub capture: Capture,
    pub listener: Listener,
    pub wake_name: String,
}

impl Voice {
    /// Starts the audio thread and the conversation task (on the current runtime).
    pub fn start(
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
        } = ears;
        let (stop, stop_rx) = watch::channel(false);
        let (heard_tx, heard_rx) = mpsc::unbounded_channel();
        let (control_tx, control_rx) = std::sync::mpsc::channel();
        let (asks_tx, asks_rx) = mpsc::unbounded_channel();
        let (judged_tx, judged) = mpsc::unbounded_channel();
        let (paused_tx, paused_rx) = mpsc::unbounded_channel();
        pipeline.set_ear(Arc::new(LoopEar { asks: asks_tx }));
        let audio_beat = Heartbeat::new();
        let turn_beat = Heartbeat::new();
        let capture_status = Arc::new(Mutex::new(CaptureStatus::Starting));
        let audio = AudioLoop {
            capture,
            listener,
            heard: heard_tx,
            paused: paused_tx,
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
            asks: asks_rx,
            answer: None,
            stop: stop_rx,
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
    paused: mpsc::UnboundedSender<Command>,
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
            while let Ok(control) = self.control.try_recv() {
                match control {
                    Control::Listen(ms) => self.listener.listen(ms),
                    Control::Cancel => self.listener.cancel(),
                    Control::Finish(end) => {
                        if let Some(heard) = self.listener.finish(end)
                            && self.heard.send((heard, Instant::now())).is_err()
                        {
                            return;
                        }
                    }
                }
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
                    if let Some(paused) = self.listener.take_pause()
                        && self.paused.send(paused).is_err()
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
    /// A turn asking for the answer to its question.
    asks: mpsc::UnboundedReceiver<oneshot::Sender<Option<Command>>>,
    /// Where the next command (or silence) goes instead of starting a turn.
    answer: Option<oneshot::Sender<Option<Command>>>,
    stop: watch::Receiver<bool>,
    beat: Heartbeat,
    notifier: Arc<Notifier>,
    capture_status: Arc<Mutex<CaptureStatus>>,
    idle_status: String,
    /// The status last sent, so each change is sent (and logged) once.
    shown: String,
    /// Speech from skills and due timers.
    spoken: mpsc::Receiver<Spoken>,
    /// What came from `spoken` and waits for the turn (or the listening) to end.
    later: VecDeque<Spoken>,
    /// A due timer ringing.
    ringing: Option<Ringing>,
    /// A command is being listened to (after the wake word, or in a follow-up window).
    listening: bool,
    /// Agreeing with other spokes on who answers; none when alone or turned off.
    arbiter: Option<Arbiter>,
    /// A wake word heard here, waiting for the other spokes' claims.
    round: Option<Round>,
    /// Lost a round to a spoke that heard the wake word ending here: the command
    /// captured after it is dropped if it still arrives.
    lost_from: Option<u64>,
    /// Commands so far whose speaker paused, to be judged finished or not.
    paused: mpsc::UnboundedReceiver<Command>,
    /// Transcripts of paused commands, judged finished or not, as they are made.
    judged: mpsc::UnboundedReceiver<(u64, Option<Transcript>)>,
    judged_tx: mpsc::UnboundedSender<(u64, Option<Transcript>)>,
    /// A paused command is being transcribed: where its speech ended.
    judging: Option<u64>,
    /// The command that paused there ended before its transcript was ready: it waits
    /// for it rather than being transcribed twice.
    waiting: Option<(Command, Instant)>,
    /// A later pause, judged when the transcription in progress ends.
    next_pause: Option<Command>,
    /// The last paused command's transcript, for the command it turns out to be.
    guess: Guess,
}

/// Agreeing with other spokes on which one answers a wake word several heard.
///
/// Each spoke that hears it publishes a [`WakeClaim`] and keeps capturing the command
/// for `wake.arbitration_ms`; then the one with the highest proximity answers (score,
/// then device id, break ties), and the others drop what they captured. Claims are
/// timed by when they arrive here, on this clock. One that arrived more than
/// [`Arbiter::decided_after`] before this spoke's own detection belongs to a round
/// its spoke has already decided (without knowing of this one): this spoke loses.
struct Arbiter {
    link: crate::mqtt::Link,
    claims: tokio::sync::broadcast::Receiver<(String, WakeClaim, Instant)>,
    window: Duration,
    /// Claims of the last few seconds: device, claim, arrival.
    recent: VecDeque<(String, WakeClaim, Instant)>,
}

/// The level a spoke that is talking or answering claims: above any measured one.
const BUSY_PROXIMITY_DB: f32 = 200.0;

/// How far apart two detections of one utterance can be.
const ROUND_SPAN: Duration = Duration::from_millis(1_500);

impl Arbiter {
    fn new(link: crate::mqtt::Link, window: Duration) -> Arbiter {
        Arbiter {
            claims: link.wake_claims(),
            link,
            window,
            recent: VecDeque::new(),
        }
    }

    /// A claim older than this when a spoke detects the wake word was decided without
    /// it: the window less the time a claim may take to travel.
    fn decided_after(&self) -> Duration {
        self.window - (self.window / 3).min(Duration::from_millis(50))
    }

    fn heard(&mut self, claim: (String, WakeClaim, Instant)) {
        let now = Instant::now();
        while self
            .recent
            .front()
            .is_some_and(|(_, _, at)| now.duration_since(*at) > ROUND_SPAN * 2)
        {
            self.recent.pop_front();
        }
        if self.recent.len() < 64 {
            self.recent.push_back(claim);
        }
    }

    /// Who answers instead of this spoke, and why; `None`: this spoke does.
    fn winner(&self, round: &Round) -> Option<(String, Lost)> {
        winner(
            self.link.device_id(),
            &round.claim,
            round.at,
            &self.recent,
            self.decided_after(),
        )
    }
}

/// Why another spoke answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lost {
    /// It heard the wake word louder over its room.
    Farther,
    /// Its round was decided before this spoke heard the wake word.
    Late,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Lost::Farther => "it heard the wake word louder over its room",
            Lost::Late => "it heard the wake word first and has answered",
        })
    }
}

/// The round's verdict for spoke `own` that heard the wake word at `at` with `claim`,
/// given the other spokes' `recent` claims (device, claim, arrival): the best claim of
/// the round wins (proximity, then score, then the smaller device id), and a claim that
/// arrived `decided` or more before `at` means its round is over and this spoke lost.
fn winner(
    own: &str,
    claim: &WakeClaim,
    at: Instant,
    recent: &VecDeque<(String, WakeClaim, Instant)>,
    decided: Duration,
) -> Option<(String, Lost)> {
    let key = |device: &str, claim: &WakeClaim| {
        (
            claim.proximity_db,
            claim.score,
            std::cmp::Reverse(device.to_string()),
        )
    };
    let mut best: Option<(&str, &WakeClaim)> = None;
    for (device, other, arrived) in recent {
        let before = at.saturating_duration_since(*arrived);
        let after = arrived.saturating_duration_since(at);
        if before > ROUND_SPAN || after >= decided {
            continue;
        }
        if before >= decided {
            return Some((device.clone(), Lost::Late));
        }
        if best.is_none_or(|(d, c)| key(device, other) > key(d, c)) {
            best = Some((device, other));
        }
    }
    match best {
        Some((device, other)) if key(device, other) > key(own, claim) => {
            Some((device.to_string(), Lost::Farther))
        }
        _ => None,
    }
}

/// A wake word heard here while the spokes agree on who answers.
struct Round {
    detection: Detection,
    claim: WakeClaim,
    /// When it was heard.
    at: Instant,
    /// When the window closes.
    decide_at: Instant,
    /// What the listener completed meanwhile.
    held: Vec<(Heard, Instant)>,
}

/// The next claim from the other spokes; never, without an arbiter.
async fn next_claim(arbiter: &mut Option<Arbiter>) -> Option<(String, WakeClaim, Instant)> {
    use tokio::sync::broadcast::error::RecvError;
    let Some(arbiter) = arbiter else {
        return std::future::pending().await;
    };
    loop {
        match arbiter.claims.recv().await {
            Ok(claim) => return Some(claim),
            Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return std::future::pending().await,
        }
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at.into()).await;
    }
}

/// Due timers ringing until stopped.
struct Ringing {
    /// What is said at each ring.
    lines: Vec<String>,
    /// When it stops by itself.
    until: Instant,
    /// Since when the last ring has been quiet.
    quiet_since: Option<Instant>,
    /// How many times it has rung.
    rings: u32,
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

    /// A turn wants the answer to its question: listen without the wake word.
    fn listen_for_answer(&mut self, reply: oneshot::Sender<Option<Command>>) {
        self.stop_ringing("a question is asked");
        self.answer = Some(reply);
        let _ = self.control.send(Control::Listen(self.settings.confirm_ms));
        self.show("Listening for yes or no");
    }

    /// What was heard while a turn waits for an answer goes to that turn; returns
    /// what is not an answer (or when nobody waits any more).
    fn answer_with(&mut self, heard: Heard) -> Option<Heard> {
        let Some(reply) = self.answer.take().filter(|r| !r.is_closed()) else {
            return Some(heard);
        };
        match heard {
            Heard::Command(command) => {
                let _ = reply.send(Some(command));
            }
            Heard::NoSpeech { .. } => {
                let _ = reply.send(None);
            }
            // The wake word instead of an answer: no answer (dropping `reply`), and the
            // wake word is handled as always.
            Heard::Woke(_) => return Some(heard),
        }
        self.show("Answering");
        None
    }

    /// Says or rings what waits in `later`, unless a turn runs or someone is being
    /// listened to. While ringing, only more due timers join in; the rest waits.
    fn deliver(&mut self, turn_running: bool) {
        // During a round the listener is capturing the command: nothing may replace it.
        if turn_running || self.listening || self.answer.is_some() || self.round.is_some() {
            return;
        }
        let mut held = VecDeque::new();
        while let Some(item) = self.later.pop_front() {
            let speaker = self.pipeline.speaker();
            match item {
                Spoken::Due(due) if due.lateness == Lateness::Stale => {
                    tracing::info!(skill = %due.entry.skill, "came due long ago; said, not rung");
                    speaker.say(&due.line());
                }
                Spoken::Due(due) => self.ring(due.line()),
                other if self.ringing.is_some() => held.push_back(other),
                Spoken::Say(text) => speaker.say(&text),
                Spoken::Cue(cue) => speaker.cue(cue),
                Spoken::Announce(text) => {
                    tracing::info!(%text, "announcement");
                    speaker.cue(Cue::Chime);
                    speaker.say(&text);
                }
            }
        }
        self.later = held;
    }

    /// Starts ringing `line`, or adds it to the ring in progress.
    fn ring(&mut self, line: String) {
        if let Some(ringing) = &mut self.ringing {
            ringing.lines.push(line);
            return;
        }
        let ring = Duration::from_millis(self.settings.ring_ms);
        self.show(&format!("Ringing: {line}"));
        self.ringing = Some(Ringing {
            lines: vec![line],
            until: Instant::now() + ring,
            quiet_since: None,
            rings: 0,
        });
        self.play_ring();
        let _ = self.control.send(Control::Listen(self.settings.ring_ms));
    }

    fn play_ring(&mut self) {
        let Some(ringing) = &mut self.ringing else {
            return;
        };
        ringing.quiet_since = None;
        ringing.rings += 1;
        if ringing.rings > 1 {
            tracing::info!(ring = ringing.rings, "ringing again");
        }
        let speaker = self.pipeline.speaker();
        speaker.cue(Cue::Ring);
        for line in &ringing.lines {
            speaker.say(line);
        }
    }

    /// Keeps a ring going: again after [`RING_GAP`] of quiet; ends it at its time.
    fn keep_ringing(&mut self) {
        let Some(ringing) = &mut self.ringing else {
            return;
        };
        let now = Instant::now();
        if now >= ringing.until {
            self.stop_ringing("nobody stopped it within timers.ring_ms");
            let _ = self.control.send(Control::Cancel);
            let idle = self.idle_status.clone();
            self.show(&idle);
            return;
        }
        if self.pipeline.speaker().busy() {
            ringing.quiet_since = None;
        } else if now.duration_since(*ringing.quiet_since.get_or_insert(now)) >= RING_GAP {
            self.play_ring();
        }
    }

    /// After an utterance that was not "stop", listen again for the rest of the ring.
    fn listen_while_ringing(&mut self) {
        if let Some(ringing) = &self.ringing {
            // Under a second left: the ring ends before anyone could finish a word.
            let left = ringing.until.saturating_duration_since(Instant::now());
            if left >= Duration::from_secs(1) {
                let _ = self.control.send(Control::Listen(left.as_millis() as u64));
            }
        }
    }

    fn stop_ringing(&mut self, why: &str) {
        if let Some(ringing) = self.ringing.take() {
            tracing::info!(lines = ?ringing.lines, "ringing stopped: {why}");
            self.pipeline.speaker().stop();
        }
    }

    /// What the listener completed: an answer, a stop while ringing, a wake word (maybe
    /// to agree on with other spokes first), a command, or nothing said.
    fn on_heard(
        &mut self,
        heard: Heard,
        at: Instant,
        turn: &mut Option<Turn>,
        queued: &mut Option<(Command, Instant)>,
        stop_check: &mut Option<JoinHandle<bool>>,
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
        if let Some(from) = self.lost_from.take() {
            let start = match &heard {
                Heard::Command(c) => Some(c.start),
                Heard::NoSpeech { at } => Some(*at),
                Heard::Woke(_) => None,
            };
            if start.is_some_and(|s| s >= from)
                && !self.listening
                && self.answer.is_none()
                && self.ringing.is_none()
            {
                tracing::debug!("dropped what was heard after losing the round");
                return;
            }
        }
        let Some(heard) = self.answer_with(heard) else {
            return;
        };
        if let Some(round) = &mut self.round {
            // Not ours to act on until the round is decided.
            round.held.push((heard, at));
            return;
        }
        if self.ringing.is_some() && !self.listening {
            match heard {
                Heard::Command(command) => {
                    let pipeline = self.pipeline.clone();
                    *stop_check = Some(tokio::spawn(
                        async move { pipeline.says_stop(command).await },
                    ));
                    return;
                }
                Heard::NoSpeech { .. } => {
                    self.listen_while_ringing();
                    return;
                }
                Heard::Woke(_) => self.stop_ringing("wake word"),
            }
        }
        match heard {
            Heard::Woke(detection) => {
                self.lost_from = None;
                if !self.open_round(&detection, self.busy(turn)) {
                    self.woke(&detection, turn);
                }
            }
            Heard::Command(command) => {
                self.listening = false;
                if turn.is_some() {
                    tracing::info!(
                        "a command came during a reply: it waits for the reply to finish"
                    );
                    *queued = Some((command, at));
                } else {
                    *turn = Some(self.spawn_turn(command, at));
                    self.show("Answering");
                }
            }
            Heard::NoSpeech { .. } => {
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
        let stt = self.pipeline.transcriber.clone();
        let done = self.judged_tx.clone();
        tokio::task::spawn_blocking(move || {
            // Always answered, even if whisper panics: the loop waits for it.
            let transcript = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                stt.transcribe(&command.samples)
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
                t.task.abort();
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
        if !arbiter.link.peers_online() {
            return false;
        }
        // A spoke that is talking hears its own voice in its room's floor, so its
        // level reads low; but the person is most likely interrupting it.
        let claim = WakeClaim {
            schema: crate::mqtt::protocol::SCHEMA_VERSION,
            proximity_db: if busy {
                BUSY_PROXIMITY_DB
            } else {
                detection.proximity_db
            },
            score: detection.score,
        };
        if !arbiter.link.claim_wake(&claim) {
            tracing::warn!("could not tell the other spokes about the wake word; answering here");
            return false;
        }
        let now = Instant::now();
        self.round = Some(Round {
            detection: detection.clone(),
            claim,
            at: now,
            decide_at: now + arbiter.window,
            held: Vec::new(),
        });
        true
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

    async fn run(mut self) {
        let idle = self.idle_status.clone();
        self.show(&idle);
        let mut turn: Option<Turn> = None;
        let mut queued: Option<(Command, Instant)> = None;
        // Transcribing what was heard while ringing, to see whether it was "stop".
        let mut stop_check: Option<JoinHandle<bool>> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            let round_ends = self.round.as_ref().map(|r| r.decide_at);
            tokio::select! {
                _ = self.stop.changed() => break,
                Some(reply) = self.asks.recv() => self.listen_for_answer(reply),
                Some(item) = self.spoken.recv() => {
                    self.later.push_back(item);
                    self.deliver(turn.is_some());
                }
                said_stop = async { stop_check.as_mut().expect("guarded").await }, if stop_check.is_some() => {
                    stop_check = None;
                    if said_stop.unwrap_or(false) {
                        self.stop_ringing("stop phrase");
                        self.pipeline.speaker().cue(Cue::Done);
                        self.show(&idle);
                        self.deliver(turn.is_some());
                    } else {
                        self.listen_while_ringing();
                    }
                }
                heard = self.heard.recv() => {
                    let Some((heard, at)) = heard else { break };
                    self.on_heard(heard, at, &mut turn, &mut queued, &mut stop_check);
                }
                Some(command) = self.paused.recv() => self.judge(command),
                Some((end, transcript)) = self.judged.recv() => {
                    if let Some((heard, at)) = self.judged(end, transcript) {
                        self.on_heard(heard, at, &mut turn, &mut queued, &mut stop_check);
                    }
                }
                Some(claim) = next_claim(&mut self.arbiter) => {
                    if let Some(arbiter) = &mut self.arbiter {
                        arbiter.heard(claim);
                    }
                }
                _ = sleep_until_some(round_ends), if round_ends.is_some() => {
                    for (heard, at) in self.decide(&mut turn) {
                        self.on_heard(heard, at, &mut turn, &mut queued, &mut stop_check);
                    }
                }
                outcome = async { turn.as_mut().map(|t| &mut t.task).expect("guarded").await }, if turn.is_some() => {
                    turn = None;
                    release_memory();
                    match outcome {
                        Ok(outcome) if outcome.asked && self.settings.follow_up_ms > 0 && queued.is_none() && self.round.is_none() => {
                            self.listening = true;
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
                    self.deliver(turn.is_some());
                }
                _ = tick.tick() => {
                    if turn.as_ref().is_none_or(|t| t.started.elapsed() < TURN_STUCK) {
                        self.beat.beat();
                    }
                    self.keep_ringing();
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

    fn claim(proximity_db: f32, score: f32) -> WakeClaim {
        WakeClaim {
            schema: 1,
            proximity_db,
            score,
        }
    }

    #[test]
    fn the_spoke_that_heard_it_loudest_over_its_room_answers() {
        let at = Instant::now();
        let decided = Duration::from_millis(250);
        let ms = Duration::from_millis;
        let own = claim(30.0, 0.6);
        let recent = VecDeque::from([("hall".to_string(), claim(42.0, 0.5), at + ms(40))]);
        assert_eq!(
            winner("kitchen", &own, at, &recent, decided),
            Some(("hall".to_string(), Lost::Farther))
        );
        // Louder here: this spoke answers, whatever the other's score.
        let own = claim(45.0, 0.5);
        assert_eq!(winner("kitchen", &own, at, &recent, decided), None);
        // Equal proximity: the score breaks the tie, then the smaller device id.
        let own = claim(42.0, 0.6);
        assert_eq!(winner("kitchen", &own, at, &recent, decided), None);
        let own = claim(42.0, 0.5);
        assert_eq!(winner("attic", &own, at, &recent, decided), None);
        assert_eq!(
            winner("kitchen", &own, at, &recent, decided),
            Some(("hall".to_string(), Lost::Farther))
        );
    }

    #[test]
    fn a_claim_outside_the_round_does_not_count_and_a_decided_round_wins() {
        let at = Instant::now() + Duration::from_secs(5);
        let decided = Duration::from_millis(250);
        let ms = Duration::from_millis;
        let own = claim(30.0, 0.6);
        // Arrived after this spoke's window closed, or from an utterance long before.
        let outside = VecDeque::from([
            ("hall".to_string(), claim(50.0, 0.6), at + ms(260)),
            ("attic".to_string(), claim(50.0, 0.6), at - ms(1_600)),
        ]);
        assert_eq!(winner("kitchen", &own, at, &outside, decided), None);
        // Heard 400 ms before this spoke heard it: that round is over, even though
        // this spoke heard it louder.
        let own = claim(60.0, 0.6);
        let early = VecDeque::from([("hall".to_string(), claim(20.0, 0.5), at - ms(400))]);
        assert_eq!(
            winner("kitchen", &own, at, &early, decided),
            Some(("hall".to_string(), Lost::Late))
        );
    }
}
