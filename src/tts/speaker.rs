//! Speaking a reply while it is still being written: sentences go in as the model
//! streams them, one thread synthesises them in order and hands the audio to the
//! output, so the first sentence plays while later ones are synthesised or not yet
//! written. [`Speaker::stop`] (barge-in) drops what is queued, what is being
//! synthesised, and what is playing. Sentences are spoken in the language last set
//! with [`Speaker::set_language`]: the language of the conversation, which also suits
//! what a skill says later.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Synth;
use crate::audio::cues::{CUE_RATE, Cue};
use crate::audio::playback::Output;

enum Job {
    Say(String, Option<&'static str>, u64),
    Cue(Cue, u64),
}

#[derive(Default)]
struct Shared {
    /// Bumped by `stop`: jobs from an older generation are dropped.
    generation: AtomicU64,
    /// Jobs sent and not yet handed to the output.
    pending: AtomicUsize,
    /// The language sentences are spoken in (`None`: the configured voice's).
    language: Mutex<Option<&'static str>>,
}

/// Speaks sentences and cues, in order, on an [`Output`].
pub struct Speaker {
    jobs: Option<Sender<Job>>,
    shared: Arc<Shared>,
    output: Arc<dyn Output>,
    cues: bool,
    thread: Option<JoinHandle<()>>,
}

impl Speaker {
    /// Starts the synthesis thread. `cues`: whether [`Speaker::cue`] makes a sound.
    pub fn start(synth: Synth, output: Arc<dyn Output>, cues: bool) -> std::io::Result<Speaker> {
        let (tx, rx) = mpsc::channel::<Job>();
        let shared = Arc::new(Shared::default());
        let (thread_shared, thread_output) = (shared.clone(), output.clone());
        let thread = std::thread::Builder::new()
            .name("tts".into())
            .spawn(move || {
                for job in rx {
                    let current = |g| g == thread_shared.generation.load(Ordering::SeqCst);
                    match job {
                        Job::Say(text, language, g) if current(g) => {
                            let started = Instant::now();
                            match synth.synthesize_in(&text, language) {
                                Ok(speech) if current(g) => {
                                    tracing::debug!(
                                        took_ms = started.elapsed().as_millis() as u64,
                                        secs = speech.duration().as_secs_f32(),
                                        "sentence synthesised"
                                    );
                                    thread_output.play(&speech.samples, speech.rate);
                                }
                                Ok(_) => {}
                                Err(super::TtsError::Off) => {
                                    tracing::info!(reply = %text, "(speech is off)");
                                }
                                Err(error) => tracing::warn!("{error}; not spoken: {text:?}"),
                            }
                        }
                        Job::Cue(cue, g) if current(g) => {
                            thread_output.play(&cue.samples(), CUE_RATE)
                        }
                        _ => {}
                    }
                    thread_shared.pending.fetch_sub(1, Ordering::SeqCst);
                }
            })?;
        Ok(Speaker {
            jobs: Some(tx),
            shared,
            output,
            cues,
            thread: Some(thread),
        })
    }

    fn send(&self, job: Job) {
        self.shared.pending.fetch_add(1, Ordering::SeqCst);
        if self.jobs.as_ref().is_none_or(|tx| tx.send(job).is_err()) {
            self.shared.pending.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Queues a sentence (markdown marks are dropped: they are not meant to be read).
    pub fn say(&self, text: &str) {
        let text = speakable(text);
        if !text.is_empty() {
            self.send(Job::Say(
                text,
                self.language(),
                self.shared.generation.load(Ordering::SeqCst),
            ));
        }
    }

    /// Speaks what is said from now on in `language` (a code such as `de`).
    pub fn set_language(&self, language: Option<&'static str>) {
        *self
            .shared
            .language
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = language;
    }

    /// The language sentences are spoken in now.
    pub fn language(&self) -> Option<&'static str> {
        *self
            .shared
            .language
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues a cue (when cues are on).
    pub fn cue(&self, cue: Cue) {
        if self.cues {
            self.send(Job::Cue(cue, self.shared.generation.load(Ordering::SeqCst)));
        }
    }

    /// Stops speaking now: drops queued sentences and what is playing.
    pub fn stop(&self) {
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        self.output.stop();
    }

    /// Whether anything is queued, being synthesised or playing.
    pub fn busy(&self) -> bool {
        self.shared.pending.load(Ordering::SeqCst) > 0 || self.output.busy()
    }

    /// Waits until everything queued has been played; false if `timeout` passed first.
    pub fn wait_done(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while self.busy() {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// The output it plays on (for first-audio timings).
    pub fn output(&self) -> &Arc<dyn Output> {
        &self.output
    }
}

impl Drop for Speaker {
    fn drop(&mut self) {
        self.stop();
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Text as it should be read aloud: markdown emphasis, headings, code ticks and list
/// bullets removed, whitespace collapsed.
pub fn speakable(text: &str) -> String {
    let cleaned: String = text
        .chars()
        .filter(|c| !matches!(c, '*' | '_' | '`' | '#'))
        .collect();
    let words: Vec<&str> = cleaned.split_whitespace().collect();
    let words = match words.first() {
        Some(&"-") | Some(&"•") => &words[1..],
        _ => &words[..],
    };
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records what was played, with a pause per play to stand in for synthesis.
    #[derive(Default)]
    struct Recorder {
        played: Mutex<Vec<usize>>,
        stops: AtomicUsize,
    }

    impl Output for Recorder {
        fn play(&self, samples: &[f32], _rate: u32) {
            self.played.lock().unwrap().push(samples.len());
        }
        fn stop(&self) {
            self.stops.fetch_add(1, Ordering::SeqCst);
        }
        fn busy(&self) -> bool {
            false
        }
        fn first_audio(&self) -> Option<Instant> {
            None
        }
        fn mark(&self) {}
    }

    #[test]
    fn markdown_is_not_read_aloud() {
        assert_eq!(
            speakable("- **Bold** and `code`,  # too"),
            "Bold and code, too"
        );
        assert_eq!(speakable("It is 5 - 3."), "It is 5 - 3.");
    }

    #[test]
    fn sentences_are_spoken_in_order_and_stop_drops_the_queue() {
        let recorder = Arc::new(Recorder::default());
        let synth = Synth::new(&super::super::TtsSettings::default()).expect("espeak-ng");
        let speaker = Speaker::start(synth, recorder.clone(), true).unwrap();
        speaker.cue(Cue::Woke);
        speaker.say("One.");
        speaker.say("Two, a longer sentence than the first one.");
        assert!(speaker.wait_done(Duration::from_secs(10)));
        let played = recorder.played.lock().unwrap().clone();
        assert_eq!(played.len(), 3);
        assert_eq!(played[0], Cue::Woke.samples().len());
        assert!(played[2] > played[1], "{played:?}");
        for i in 0..20 {
            speaker.say(&format!("Sentence number {i}."));
        }
        speaker.stop();
        assert!(speaker.wait_done(Duration::from_secs(10)));
        let after = recorder.played.lock().unwrap().len() - 3;
        assert!(after < 3, "{after} sentences played after stop");
        assert_eq!(recorder.stops.load(Ordering::SeqCst), 1);
    }
}
