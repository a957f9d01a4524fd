//! `listen FILE.wav [--out reply.wav]`: the whole voice pipeline on a recording, each
//! stage printed with its timing. Audio positions are times in the recording;
//! durations after the end of speech are wall clock, as the user would wait for them.
//!
//! A `@confirm` call asks its question as `run` does; the answer is the next utterance
//! in the recording after the command (no wake word needed), within `vad.confirm_ms`.

use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;
use tokio_util::sync::CancellationToken;

use super::{caller_link, load_skills, parts, print_out, runtime};
use crate::agent::TurnEvent;
use crate::audio::Frame;
use crate::audio::playback::{Output, WavSink};
use crate::audio::wav::{frames, read_wav_16k};
use crate::audio::{SAMPLE_RATE, ms_to_samples};
use crate::config::Config;
use crate::daemon::listener::{Command, Guess, Heard, Listener};
use crate::daemon::pipeline::{Ear, Step, clean_transcript};
use crate::daemon::turn_end::sounds_finished;
use crate::skills::watch::LiveRegistry;
use crate::stt::Transcriber;

fn secs(at: u64) -> f64 {
    at as f64 / f64::from(SAMPLE_RATE)
}

/// The recording, read frame by frame through the listener by the main loop and, for
/// the answer to a confirmation question, by [`RecordingEar`].
struct Recording {
    listener: Listener,
    frames: std::vec::IntoIter<Frame>,
    /// For the words so far when the speaker pauses (judged at once: a recording
    /// waits for nobody).
    transcriber: Arc<Transcriber>,
    guess: Guess,
}

impl Recording {
    /// What the listener hears next, `None` at the end of the recording.
    fn next(&mut self) -> Option<Heard> {
        for frame in self.frames.by_ref() {
            if let Some(heard) = self.listener.push(&frame) {
                return Some(self.guess.attach(heard));
            }
            let Some(paused) = self.listener.take_pause() else {
                continue;
            };
            let end = paused.end;
            match self.transcriber.transcribe(&paused.samples) {
                Ok(transcript) => {
                    let text = clean_transcript(&transcript.text);
                    let finished = sounds_finished(&text, transcript.last_word_probability);
                    say(format!(
                        "{:7.2} s  paused: {text:?} sounds {}",
                        secs(self.listener.position()),
                        if finished {
                            "finished"
                        } else {
                            "unfinished, waiting for more"
                        }
                    ));
                    self.guess.keep(end, transcript);
                    if finished && let Some(heard) = self.listener.finish(end) {
                        return Some(self.guess.attach(heard));
                    }
                }
                Err(error) => say(format!(
                    "{:7.2} s  speech to text failed on a pause: {error}",
                    secs(self.listener.position())
                )),
            }
        }
        None
    }
}

/// Answers come from the recording, right after the command that asked.
struct RecordingEar {
    recording: Arc<Mutex<Recording>>,
    window_ms: u64,
}

impl Ear for RecordingEar {
    fn next_utterance(&self) -> tokio::sync::oneshot::Receiver<Option<Command>> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let mut recording = self.recording.lock().unwrap_or_else(|e| e.into_inner());
        recording.listener.listen(self.window_ms);
        let heard = match recording.next() {
            Some(Heard::Command(command)) => {
                say(format!(
                    "{:7.2} s  answer ended (spoken {:.2}-{:.2} s)",
                    secs(command.decided_at),
                    secs(command.start),
                    secs(command.end)
                ));
                Some(command)
            }
            Some(Heard::NoSpeech { at }) => {
                say(format!("{:7.2} s  no answer", secs(at)));
                None
            }
            Some(Heard::Woke(_) | Heard::Speaking { .. } | Heard::Stop) | None => None,
        };
        let _ = reply.send(heard);
        answer
    }
}

fn say(line: String) {
    // A closed stdout (`| head`) is not worth failing the run for.
    let _ = print_out(&format!("{line}\n"));
}

/// Runs the pipeline over `file`; exit 0 when at least one command was answered and
/// none failed, 2 otherwise.
pub fn listen(config: &Config, file: &Path, out: Option<&Path>, no_wake: bool) -> Result<ExitCode> {
    let (mut samples, _) = read_wav_16k(file)?;
    // The end of speech needs silence after it; a recording may stop right at the word.
    samples.extend(std::iter::repeat_n(
        0.0,
        ms_to_samples(config.vad.hangover_ms.max(config.vad.mid_sentence_ms) + 1_000),
    ));
    let loaded = Instant::now();
    let parts = parts(config);
    let transcriber = Arc::new(parts.transcriber()?);
    let (_, detector) = parts.wake_word()?;
    let sink = out.map(|path| Arc::new(WavSink::new(path, parts.volume())));
    let output: Arc<dyn Output> = match &sink {
        Some(sink) => sink.clone(),
        // The microphone here is a file: it never hears the speaker, nothing to cancel.
        None => Arc::new(parts.player()?.0),
    };
    let speaker = Arc::new(parts.speaker(output)?);
    let rt = runtime()?;
    let skills = Arc::new(LiveRegistry::new(Arc::new(load_skills(
        &parts,
        &config.skills.dir,
    ))));
    let link = caller_link(&rt, &parts)?;
    let agent = parts.agent(skills, link.as_ref(), CancellationToken::new())?;
    let mut listener = parts.listener(detector)?;
    if no_wake {
        listener.listen(config.vad.no_speech_timeout_ms);
    }
    let recording = Arc::new(Mutex::new(Recording {
        listener,
        frames: frames(&samples, 0).collect::<Vec<_>>().into_iter(),
        transcriber: transcriber.clone(),
        guess: Guess::default(),
    }));
    let ear = RecordingEar {
        recording: recording.clone(),
        window_ms: config.vad.confirm_ms,
    };
    let pipeline = parts.pipeline(transcriber, agent, speaker, Some(Arc::new(ear)));
    say(format!(
        "ready in {:.2} s; {:.2} s of audio from {}",
        loaded.elapsed().as_secs_f64(),
        secs(samples.len() as u64),
        file.display()
    ));
    let (mut answered, mut failed) = (0, 0);
    loop {
        // Not held while a command is answered: the ear reads on for the answer.
        let heard = recording.lock().unwrap_or_else(|e| e.into_inner()).next();
        let Some(heard) = heard else { break };
        match heard {
            Heard::Woke(d) => say(format!(
                "{:7.2} s  wake word {:?} (score {:.2}, spoken {:.2}-{:.2} s, {:.1} dB over the room's noise)",
                d.fired_secs(),
                d.name,
                d.score,
                d.start_secs(),
                d.end_secs(),
                d.proximity_db
            )),
            Heard::NoSpeech { at } => say(format!("{:7.2} s  no command followed", secs(at))),
            // `listen` opens no window over a ring.
            Heard::Speaking { .. } | Heard::Stop => {}
            Heard::Command(command) => {
                say(format!(
                    "{:7.2} s  speech ended (spoken {:.2}-{:.2} s{})",
                    secs(command.decided_at),
                    secs(command.start),
                    secs(command.end),
                    if command.cut {
                        ", cut at the length limit"
                    } else {
                        ""
                    }
                ));
                let heard_at = Instant::now();
                let report = move |step: Step<'_>| print_step(step, heard_at);
                let outcome = rt.block_on(pipeline.respond(command, heard_at, &report));
                if outcome.ok {
                    answered += 1;
                } else {
                    failed += 1;
                }
            }
        }
    }
    if answered + failed == 0 {
        say(format!(
            "no command heard ({})",
            if no_wake { "no speech" } else { "no wake word" }
        ));
    }
    if let Some(link) = link {
        rt.block_on(link.shutdown());
    }
    if let (Some(sink), Some(path)) = (sink, out) {
        let secs = sink.finish()?;
        say(format!("reply audio: {} ({secs:.2} s)", path.display()));
    }
    Ok(if answered > 0 && failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

fn print_step(step: Step<'_>, heard_at: Instant) {
    let t = format!("  +{:.2} s", heard_at.elapsed().as_secs_f64());
    match step {
        Step::Transcribed {
            text,
            took,
            language,
        } => say(format!(
            "{t}  transcript ({:.2} s in whisper, {language}): {text:?}",
            took.as_secs_f64()
        )),
        Step::SttFailed(error) => say(format!("{t}  speech to text failed: {error}")),
        Step::Stopped => say(format!(
            "{t}  stop phrase: speech stopped, the model not asked"
        )),
        Step::Turn(event) => match event {
            TurnEvent::Sentence(s) => say(format!("{t}  reply: {s}")),
            TurnEvent::Code(code) => {
                for line in code.lines() {
                    say(format!("{t}  | {line}"));
                }
            }
            TurnEvent::CodeResult { output, result } => {
                for line in output.lines() {
                    say(format!("{t}  > {line}"));
                }
                match result {
                    Ok(v) if v.is_empty() => {}
                    Ok(v) => say(format!("{t}  = {v}")),
                    Err(e) => say(format!("{t}  ! {e}")),
                }
            }
            TurnEvent::Notice(n) => say(format!("{t}  note: {n}")),
            TurnEvent::Error(e) => say(format!("{t}  error: {e}")),
            TurnEvent::Confirm { call, .. } => say(format!("{t}  needs confirmation: {call}")),
        },
        Step::Asked { question } => say(format!("{t}  asked: {question}")),
        Step::Answered { text, answer } => {
            say(format!("{t}  answer: {text:?}: {}", answer.as_str()))
        }
        Step::FirstAudio { after } => say(format!(
            "{t}  first audio out, {:.2} s after the end of speech",
            after.as_secs_f64()
        )),
    }
}
