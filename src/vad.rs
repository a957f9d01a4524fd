//! Voice activity detection: deciding when the user has finished a command.
//!
//! Why an energy detector with an adaptive noise floor, and not a crate: the job here is
//! narrow (the wake word already said someone is talking; we only need the end of the
//! command, fast), and the failure users of other satellites complain about is waiting
//! 10-15 s for it. A frame is speech when its energy, after a high-pass that drops hum
//! and most of the rumble in room noise, stands `threshold_db` above a noise floor that
//! follows the room (falls quickly to quiet frames, rises slowly through noise). That
//! is transparent, costs a few multiplications per sample on a Pi, needs no model or C
//! build, and was checked on espeak-ng commands with added pink noise (`tests/vad.rs`).
//! The `webrtc-vad` crate (a C build of the 2011 WebRTC GMM detector) was the
//! alternative; it decides per frame only, so the hangover, floor tracking and timeouts
//! below would be needed around it all the same.
//!
//! An utterance ends in one of three ways ([`Endpoint`]): speech followed by
//! `hangover_ms` of non-speech; nothing that sounds like speech within
//! `no_speech_timeout_ms`; or `max_utterance_ms` reached.
//!
//! Silence alone cannot tell a finished command from a speaker who pauses mid-sentence
//! ("set a timer for ... ten minutes"): a short hangover cuts them off, a long one
//! makes every answer late. With `mid_sentence_ms` set, the endpointer asks instead:
//! after [`SPECULATE_MS`] of silence it reports a pause ([`Endpointer::take_pause`]),
//! someone who can read the words so far (the voice loop transcribes them) says
//! whether they sound finished ([`Endpointer::finish`]), and only then does
//! `hangover_ms` end the utterance; unconfirmed, it ends after `mid_sentence_ms`.

use crate::audio::{FRAME_SAMPLES, ms_to_samples};

/// Frames of speech in a row before an utterance counts as started (80 ms, shorter than any
/// syllable), so a click
/// or a door does not start one.
const MIN_SPEECH_FRAMES: u32 = 4;

/// Energies are never taken below this (dBFS), so digital silence does not make the
/// floor so low that any hiss counts as speech.
const FLOOR_MIN_DB: f64 = -75.0;

/// Frames below this (dBFS) are never speech, whatever the floor.
const SPEECH_MIN_DB: f64 = -55.0;

/// The high-pass pole: about 200 Hz at 16 kHz (below the speech that matters).
const HIGH_PASS_POLE: f64 = 0.92;

/// The noise floor is the quietest frame of the last 2 s (100 frames): speech always
/// has gaps between syllables and words, so this is the room's level even while the user
/// talks, and it follows a fan switching on within the window.
const FLOOR_WINDOW_FRAMES: usize = 100;

/// Once speech has started, frames need this much less above the floor to continue
/// it (hysteresis keeps quiet word endings inside the utterance).
const CONTINUE_EASIER_DB: f64 = 3.0;

/// Silence after which a pause is reported for a look at the words so far: long
/// enough to pass the gaps inside and between most words, short enough that their
/// transcript is ready by the end of `hangover_ms`.
pub const SPECULATE_MS: u64 = 120;

/// What the detector needs.
#[derive(Debug, Clone, PartialEq)]
pub struct VadSettings {
    /// Non-speech after speech that ends the utterance (once it sounds finished, when
    /// `mid_sentence_ms` is set).
    pub hangover_ms: u64,
    /// Non-speech that ends an utterance nobody confirmed as finished; 0: off, every
    /// utterance ends after `hangover_ms`.
    pub mid_sentence_ms: u64,
    /// The longest utterance; it is cut here.
    pub max_utterance_ms: u64,
    /// How long to wait for speech to start.
    pub no_speech_timeout_ms: u64,
    /// How far above the noise floor a frame must be to be speech, dB. Lower is more
    /// sensitive (quiet voices, but noise may keep an utterance open).
    pub threshold_db: f64,
}

impl Default for VadSettings {
    fn default() -> Self {
        VadSettings {
            hangover_ms: 350,
            mid_sentence_ms: 0,
            max_utterance_ms: 15_000,
            no_speech_timeout_ms: 5_000,
            threshold_db: 9.0,
        }
    }
}

/// How an utterance ended. Positions count 16 kHz samples from the first one pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// Speech, then `hangover_ms` of non-speech.
    Speech {
        /// Start of the first speech frame.
        start: u64,
        /// End of the last speech frame.
        end: u64,
        /// Where the end was decided.
        detected_at: u64,
    },
    /// No speech within the no-speech timeout.
    NoSpeech {
        /// Where the timeout hit.
        at: u64,
    },
    /// The utterance reached `max_utterance_ms`.
    MaxLength {
        /// Start of speech, if any was heard.
        start: Option<u64>,
        /// Where it was cut.
        at: u64,
    },
}

/// The per-frame speech decision: high-pass, energy, adaptive noise floor.
#[derive(Debug, Clone)]
pub struct Detector {
    threshold_db: f64,
    recent_db: std::collections::VecDeque<f64>,
    x1: f64,
    y1: f64,
}

impl Detector {
    /// A detector deciding at `threshold_db` above the noise floor.
    pub fn new(threshold_db: f64) -> Detector {
        Detector {
            threshold_db,
            recent_db: std::collections::VecDeque::with_capacity(FLOOR_WINDOW_FRAMES),
            x1: 0.0,
            y1: 0.0,
        }
    }

    /// The current noise floor, dBFS (after the high-pass).
    pub fn floor_db(&self) -> Option<f64> {
        self.recent_db.iter().copied().reduce(f64::min)
    }

    /// Whether `frame` is speech; `in_speech` applies the easier continuation threshold.
    pub fn is_speech(&mut self, frame: &[f32], in_speech: bool) -> bool {
        let mut energy = 0.0f64;
        for &x in frame {
            let x = f64::from(x);
            let y = x - self.x1 + HIGH_PASS_POLE * self.y1;
            self.x1 = x;
            self.y1 = y;
            energy += y * y;
        }
        let db = (10.0 * (energy / frame.len().max(1) as f64 + 1e-12).log10()).max(FLOOR_MIN_DB);
        if self.recent_db.len() == FLOOR_WINDOW_FRAMES {
            self.recent_db.pop_front();
        }
        self.recent_db.push_back(db);
        let floor = self.floor_db().unwrap_or(db);
        let threshold = if in_speech {
            self.threshold_db - CONTINUE_EASIER_DB
        } else {
            self.threshold_db
        };
        db > SPEECH_MIN_DB && db > floor + threshold
    }
}

/// Finds the end of one utterance in a stream of 16 kHz mono samples.
#[derive(Debug, Clone)]
pub struct Endpointer {
    detector: Detector,
    /// Silence that ends a finished utterance.
    hangover: u64,
    /// Silence that ends any utterance (`hangover` when nobody judges).
    mid_sentence: u64,
    /// Silence after which a pause is reported.
    speculate: u64,
    /// The speech end last reported as a pause, and the one confirmed as finished.
    paused_end: Option<u64>,
    finished_end: Option<u64>,
    max_len: u64,
    no_speech: u64,
    /// Samples not yet making a whole frame.
    partial: Vec<f32>,
    /// Samples analysed so far.
    position: u64,
    speech_run: u32,
    /// Start of the utterance once speech has started.
    start: Option<u64>,
    last_speech_end: u64,
    done: Option<Endpoint>,
}

impl Endpointer {
    /// A detector for one utterance.
    pub fn new(settings: &VadSettings) -> Endpointer {
        let samples = |ms| ms_to_samples(ms) as u64;
        Endpointer {
            detector: Detector::new(settings.threshold_db),
            hangover: samples(settings.hangover_ms),
            mid_sentence: samples(settings.mid_sentence_ms.max(settings.hangover_ms)),
            speculate: samples(SPECULATE_MS.min(settings.hangover_ms)),
            paused_end: None,
            finished_end: None,
            max_len: samples(settings.max_utterance_ms),
            no_speech: samples(settings.no_speech_timeout_ms),
            partial: Vec::with_capacity(FRAME_SAMPLES),
            position: 0,
            speech_run: 0,
            start: None,
            last_speech_end: 0,
            done: None,
        }
    }

    /// Feeds samples (any amount); returns the endpoint once it is decided, and the
    /// same endpoint on every later call.
    pub fn push(&mut self, samples: &[f32]) -> Option<Endpoint> {
        for &s in samples {
            if self.done.is_some() {
                break;
            }
            self.partial.push(s);
            if self.partial.len() == FRAME_SAMPLES {
                let frame = std::mem::take(&mut self.partial);
                self.frame(&frame);
                self.partial = frame;
                self.partial.clear();
            }
        }
        self.done.clone()
    }

    /// Whether speech has started.
    pub fn speech_started(&self) -> bool {
        self.start.is_some()
    }

    /// Speech start and end when the speaker has paused long enough for a look at the
    /// words so far, once per pause; never when nobody judges (`mid_sentence_ms` 0).
    pub fn take_pause(&mut self) -> Option<(u64, u64)> {
        let start = self.start?;
        let silence = self.position - self.last_speech_end;
        if self.done.is_some()
            || self.mid_sentence == self.hangover
            || silence < self.speculate
            || self.paused_end == Some(self.last_speech_end)
        {
            return None;
        }
        self.paused_end = Some(self.last_speech_end);
        Some((start, self.last_speech_end))
    }

    /// The words up to `end` (from [`take_pause`](Self::take_pause)) sound finished:
    /// the utterance ends once `hangover_ms` of silence follows them, now if it
    /// already has. Ignored when speech came after `end`. Returns the endpoint once
    /// decided.
    pub fn finish(&mut self, end: u64) -> Option<Endpoint> {
        self.finished_end = Some(end);
        if let (None, Some(start)) = (&self.done, self.start)
            && self.last_speech_end == end
            && self.position - end >= self.hangover
        {
            self.done = Some(Endpoint::Speech {
                start,
                end,
                detected_at: self.position,
            });
        }
        self.done.clone()
    }

    fn frame(&mut self, frame: &[f32]) {
        self.position += frame.len() as u64;
        let speech = self.detector.is_speech(frame, self.start.is_some());
        match self.start {
            None => {
                if speech {
                    self.speech_run += 1;
                    if self.speech_run >= MIN_SPEECH_FRAMES {
                        let run = u64::from(self.speech_run) * FRAME_SAMPLES as u64;
                        self.start = Some(self.position - run);
                        self.last_speech_end = self.position;
                    }
                } else {
                    self.speech_run = 0;
                }
                if self.start.is_none() && self.position >= self.no_speech {
                    self.done = Some(Endpoint::NoSpeech { at: self.position });
                    return;
                }
            }
            Some(start) => {
                let silence = self.position - self.last_speech_end;
                let finished = self.finished_end == Some(self.last_speech_end);
                if speech {
                    self.last_speech_end = self.position;
                } else if silence >= self.mid_sentence || (finished && silence >= self.hangover) {
                    self.done = Some(Endpoint::Speech {
                        start,
                        end: self.last_speech_end,
                        detected_at: self.position,
                    });
                    return;
                }
            }
        }
        if self.position >= self.max_len {
            self.done = Some(Endpoint::MaxLength {
                start: self.start,
                at: self.position,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(seconds: f64, level: f32) -> Vec<f32> {
        (0..(16_000.0 * seconds) as usize)
            .map(|i| level * (i as f32 * 2.0 * std::f32::consts::PI * 300.0 / 16_000.0).sin())
            .collect()
    }

    fn settings() -> VadSettings {
        VadSettings::default()
    }

    #[test]
    fn tone_between_silences_ends_after_the_hangover() {
        let mut audio = vec![0.0; 8000];
        audio.extend(tone(1.0, 0.3));
        audio.extend(vec![0.0; 16_000]);
        let mut e = Endpointer::new(&settings());
        let Some(Endpoint::Speech {
            start,
            end,
            detected_at,
        }) = e.push(&audio)
        else {
            panic!("{:?}", e.push(&[]));
        };
        assert!(start.abs_diff(8000) <= 640, "{start}");
        assert!(end.abs_diff(24_000) <= 640, "{end}");
        assert!(
            detected_at - 24_000 <= ms_to_samples(450) as u64,
            "{detected_at}"
        );
    }

    #[test]
    fn silence_times_out_and_endless_speech_is_cut() {
        let mut e = Endpointer::new(&settings());
        assert_eq!(
            e.push(&vec![0.0; 6 * 16_000]),
            Some(Endpoint::NoSpeech { at: 80_000 })
        );
        let s = VadSettings {
            max_utterance_ms: 2000,
            ..settings()
        };
        let mut e = Endpointer::new(&s);
        let mut audio = vec![0.0; 4000];
        audio.extend(tone(3.0, 0.3));
        let got = e.push(&audio);
        assert!(
            matches!(
                got,
                Some(Endpoint::MaxLength {
                    start: Some(_),
                    at: 32_000
                })
            ),
            "{got:?}"
        );
    }

    #[test]
    fn a_click_does_not_start_speech() {
        let mut audio = vec![0.0; 4000];
        audio.extend(tone(0.03, 0.5));
        audio.extend(vec![0.0; 16_000]);
        let mut e = Endpointer::new(&settings());
        assert_eq!(e.push(&audio), None);
        assert!(!e.speech_started());
    }

    /// Pushes `audio` frame by frame, collecting pauses; the endpoint and the pauses.
    fn run_judged(
        e: &mut Endpointer,
        audio: &[f32],
        mut judge: impl FnMut(&mut Endpointer, u64) -> Option<Endpoint>,
    ) -> (Option<Endpoint>, Vec<u64>) {
        let mut pauses = Vec::new();
        for frame in audio.chunks(FRAME_SAMPLES) {
            if let Some(done) = e.push(frame) {
                return (Some(done), pauses);
            }
            if let Some((_, end)) = e.take_pause() {
                pauses.push(end);
                if let Some(done) = judge(e, end) {
                    return (Some(done), pauses);
                }
            }
        }
        (None, pauses)
    }

    #[test]
    fn a_pause_mid_sentence_waits_for_the_words_to_sound_finished() {
        let s = VadSettings {
            mid_sentence_ms: 1_200,
            ..settings()
        };
        // Speech, a 600 ms pause, more speech, silence.
        let mut audio = vec![0.0; 8000];
        audio.extend(tone(1.0, 0.3));
        audio.extend(vec![0.0; 9600]);
        audio.extend(tone(0.5, 0.3));
        audio.extend(vec![0.0; 32_000]);
        let second_end = 8000 + 16_000 + 9600 + 8000;

        // Nobody says it sounds finished: one utterance, ended by `mid_sentence_ms`.
        let mut e = Endpointer::new(&s);
        let (done, pauses) = run_judged(&mut e, &audio, |_, _| None);
        let Some(Endpoint::Speech {
            end, detected_at, ..
        }) = done
        else {
            panic!("{done:?}");
        };
        assert!(end.abs_diff(second_end) <= 640, "{end}");
        assert!(detected_at - end >= ms_to_samples(1_200) as u64);
        assert_eq!(pauses.len(), 2, "{pauses:?}");

        // The first part sounds unfinished, the whole sounds finished: it ends
        // `hangover_ms` after the second part.
        let mut e = Endpointer::new(&s);
        let (done, pauses) = run_judged(&mut e, &audio, |e, end| {
            (end > 30_000).then(|| e.finish(end)).flatten()
        });
        let Some(Endpoint::Speech {
            end, detected_at, ..
        }) = done.or_else(|| e.push(&[]))
        else {
            panic!("{pauses:?}");
        };
        assert!(end.abs_diff(second_end) <= 640, "{end}");
        let waited = detected_at - end;
        assert!(
            (ms_to_samples(350) as u64..ms_to_samples(400) as u64).contains(&waited),
            "{waited}"
        );

        // A yes that comes after the speaker went on is about words that were not the
        // end: ignored.
        let mut e = Endpointer::new(&s);
        let mut first = None;
        let (done, _) = run_judged(&mut e, &audio, |_, end| {
            first.get_or_insert(end);
            None
        });
        assert!(done.is_some());
        let mut e = Endpointer::new(&s);
        let split = 8000 + 16_000 + 9600 + 1600;
        assert!(e.push(&audio[..split]).is_none());
        assert!(
            e.take_pause().is_none(),
            "the first pause was not taken yet"
        );
        assert_eq!(e.finish(first.unwrap()), None);
        assert_eq!(e.push(&audio[split..split + 16_000]), None);
    }

    #[test]
    fn without_mid_sentence_nobody_is_asked() {
        let mut audio = vec![0.0; 8000];
        audio.extend(tone(1.0, 0.3));
        audio.extend(vec![0.0; 16_000]);
        let mut e = Endpointer::new(&settings());
        let (done, pauses) = run_judged(&mut e, &audio, |_, _| None);
        assert!(matches!(done, Some(Endpoint::Speech { .. })), "{done:?}");
        assert!(pauses.is_empty());
    }
}
