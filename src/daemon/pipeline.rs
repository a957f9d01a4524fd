//! One spoken command, from its audio to the reply: transcribe, stop phrases, the
//! conversation turn, speaking the reply as it streams, confirming a `@confirm` call by
//! voice. `run` (through the conversation task) and `listen FILE.wav` share it; what
//! differs between them is where the answer to a question comes from (its [`Ear`]) and
//! where the stages are reported (its [`Reporter`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::answer::{self, Answer};
use super::listener::Command;
use super::phrases::{self, Phrase};
use super::words::normalize;
use crate::agent::{Agent, Session, TurnEvent};
use crate::audio::SAMPLE_RATE;
use crate::audio::cues::Cue;
use crate::deadline::Cancel;
use crate::stt::{Transcriber, Transcript, Verdict};
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
    /// Where answers to confirmation questions come from; none: nobody can confirm.
    ear: Option<Arc<dyn Ear>>,
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
    /// Without an `ear`, `@confirm` calls cannot be asked about aloud and are refused.
    pub fn new(
        transcriber: Arc<Transcriber>,
        agent: Agent,
        speaker: Arc<Speaker>,
        stop_phrases: &[String],
        ear: Option<Arc<dyn Ear>>,
    ) -> Pipeline {
        let session = tokio::sync::Mutex::new(agent.session());
        Pipeline {
            transcriber,
            agent,
            session,
            speaker,
            stop_phrases: stop_phrases.iter().map(|p| normalize(p)).collect(),
            ear,
        }
    }

    /// The speaker replies go to.
    pub fn speaker(&self) -> &Arc<Speaker> {
        &self.speaker
    }

    /// The transcriber commands go through (the conversation also judges pauses with it).
    pub fn transcriber(&self) -> &Arc<Transcriber> {
        &self.transcriber
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
        // A stopped turn drops this future: whisper stops at its next token.
        let cancel = Cancel::new();
        let _stop_with_the_turn = cancel.cancel_on_drop();
        let transcribing = tokio::task::spawn_blocking(move || {
            stt.transcribe_cancellable(&command.samples, &cancel)
        });
        match transcribing.await {
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
        let Some(ear) = self.ear.clone() else {
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
}
