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
//! Why the room's bar as well: the floor is the quietest frame, right for a fan or a hum,
//! wrong for a background that talks or plays music. Other people talking and music have
//! dips, so the floor sits in them and the background itself stands the continuation
//! threshold (6 dB) above it almost all the time: in the rooms benchmark
//! (`benches/rooms.rs`, BENCHMARKS.md "Noise through the whole chain") not one command over
//! babble 5 dB below the speaker, and 6 of 48 over music 10 dB below, ended before
//! `max_utterance_ms` (15 s), and Whisper then transcribed 15 s of babble (365% WER). What
//! tells the speaker from other people talking is that they are louder, nearer. So whoever
//! hears the stream before an utterance (the listener) keeps the last 3 s of the room
//! ([`Room`]), and an utterance's frames must also clear a bar set from it: the 95th
//! percentile of the room's level smoothed over 160 ms (its loud moments, not its dips)
//! plus 2 dB, taken over the room before the wake phrase (or before a follow-up window, but
//! no higher than the last wake phrase's bar: the seconds before a follow-up hold the
//! spoke's own reply), and never more than 5 dB under the wake phrase's own level, so a
//! background as loud as the speaker cannot make them inaudible (it then keeps the
//! utterance open, as before). Speech is judged on the level smoothed over 160 ms against
//! that bar, so one loud frame of babble does not restart the silence count. In a quiet
//! room or steady noise the bar is under the floor's threshold and changes nothing. The
//! constants were set on the tests' espeak-ng commands over babble of three other espeak-ng
//! voices and sox music (`tests/vad.rs`), then measured once on the benchmark's held-out
//! voices: over music 41 of 48 commands were decided within 1 s of the last word and none
//! ran to the limit; over babble none ran to the limit either (WER 365% to 93%), but the
//! end was judged a median 0.6 s early: quiet last syllables 5 dB under babble are under
//! its loud moments too, which no level can hear. Quiet and steady-noise rooms did not
//! change. A model-based detector (Silero, WebRTC's) would tell speech from music better,
//! but not this speaker from other people talking, which is the level's job either way.
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

/// Frames the level is smoothed over (160 ms) before it is held against the room's bar:
/// longer than the gaps between syllables, shorter than those between words, so one loud
/// frame of babble cannot restart the silence count, and a word still shows.
const SMOOTH_FRAMES: usize = 8;

/// How much of the room the listener keeps (3 s): the wake phrase and the seconds before it.
const ROOM_FRAMES: usize = 150;

/// Less of the room than this (0.5 s) says too little of its loud moments: no bar.
const ROOM_MIN_FRAMES: usize = 25;

/// The room's level that speech must clear is this percentile of its smoothed levels
/// (the loud moments of the background, not its dips) ...
const BACKGROUND_PERCENTILE: f64 = 0.95;

/// ... plus this.
const BACKGROUND_MARGIN_DB: f64 = 2.0;

/// The bar is never above the speaker's own level (their wake phrase) minus this.
pub const BELOW_SPEAKER_DB: f64 = 5.0;

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

/// A frame's energy after the high-pass, and its mean over the last [`SMOOTH_FRAMES`].
#[derive(Debug, Clone, Default)]
struct Energy {
    x1: f64,
    y1: f64,
    /// The last frames' mean square, a ring written at `next`.
    recent: [f64; SMOOTH_FRAMES],
    next: usize,
    filled: usize,
}

impl Energy {
    /// `frame`'s level and the smoothed level including it, dBFS.
    fn push(&mut self, frame: &[f32]) -> (f64, f64) {
        let mut energy = 0.0f64;
        for &x in frame {
            let x = f64::from(x);
            let y = x - self.x1 + HIGH_PASS_POLE * self.y1;
            self.x1 = x;
            self.y1 = y;
            energy += y * y;
        }
        let power = energy / frame.len().max(1) as f64;
        self.recent[self.next] = power;
        self.next = (self.next + 1) % SMOOTH_FRAMES;
        self.filled = (self.filled + 1).min(SMOOTH_FRAMES);
        let smoothed = self.recent.iter().take(self.filled).sum::<f64>() / self.filled as f64;
        (db(power), db(smoothed))
    }
}

fn db(power: f64) -> f64 {
    (10.0 * (power + 1e-12).log10()).max(FLOOR_MIN_DB)
}

/// The per-frame speech decision: high-pass, energy, adaptive noise floor, and the bar
/// the room's own sound sets ([`Room::bar_db`]).
#[derive(Debug, Clone)]
pub struct Detector {
    threshold_db: f64,
    recent_db: std::collections::VecDeque<f64>,
    energy: Energy,
    bar_db: Option<f64>,
}

impl Detector {
    /// A detector deciding at `threshold_db` above the noise floor.
    pub fn new(threshold_db: f64) -> Detector {
        Detector {
            threshold_db,
            recent_db: std::collections::VecDeque::with_capacity(FLOOR_WINDOW_FRAMES),
            energy: Energy::default(),
            bar_db: None,
        }
    }

    /// Speech must also be louder than `bar_db` (dBFS, smoothed over [`SMOOTH_FRAMES`]):
    /// the level a background that talks or plays music reaches by itself.
    pub fn with_bar(mut self, bar_db: Option<f64>) -> Detector {
        self.bar_db = bar_db;
        self
    }

    /// The current noise floor, dBFS (after the high-pass).
    pub fn floor_db(&self) -> Option<f64> {
        self.recent_db.iter().copied().reduce(f64::min)
    }

    /// Whether `frame` is speech; `in_speech` applies the easier continuation threshold.
    pub fn is_speech(&mut self, frame: &[f32], in_speech: bool) -> bool {
        let (db, smoothed) = self.energy.push(frame);
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
        db > SPEECH_MIN_DB && db > floor + threshold && self.bar_db.is_none_or(|bar| smoothed > bar)
    }
}

/// The last few seconds of the room as the detector hears them (high-passed level
/// smoothed over [`SMOOTH_FRAMES`], per frame), kept by whoever hears the stream
/// before an utterance starts (the listener), for the bar that utterance must clear.
/// Fixed size, no allocation after it is made.
#[derive(Debug, Clone)]
pub struct Room {
    energy: Energy,
    /// (end position, smoothed dBFS) per frame, a ring written at `next`.
    frames: Box<[(u64, f64); ROOM_FRAMES]>,
    next: usize,
    filled: usize,
}

impl Default for Room {
    fn default() -> Self {
        Room {
            energy: Energy::default(),
            frames: Box::new([(0, FLOOR_MIN_DB); ROOM_FRAMES]),
            next: 0,
            filled: 0,
        }
    }
}

impl Room {
    /// Takes the frame that ends at stream position `end`.
    pub fn push(&mut self, frame: &[f32], end: u64) {
        let (_, smoothed) = self.energy.push(frame);
        self.frames[self.next] = (end, smoothed);
        self.next = (self.next + 1) % ROOM_FRAMES;
        self.filled = (self.filled + 1).min(ROOM_FRAMES);
    }

    /// The bar for an utterance heard after stream position `before`: the room's
    /// [`BACKGROUND_PERCENTILE`] smoothed level over the frames that ended by then, plus
    /// [`BACKGROUND_MARGIN_DB`], but never more than [`BELOW_SPEAKER_DB`] under
    /// `speaker_db` (how loud the speaker was: [`speaker_db`](Self::speaker_db)), so a
    /// loud background cannot make them inaudible. `None` with less than
    /// [`ROOM_MIN_FRAMES`] of the room heard.
    pub fn bar_db(&self, before: u64, speaker_db: Option<f64>) -> Option<f64> {
        let mut levels = [0.0f64; ROOM_FRAMES];
        let mut n = 0;
        for &(end, level) in self.frames.iter().take(self.filled) {
            if end <= before {
                levels[n] = level;
                n += 1;
            }
        }
        if n < ROOM_MIN_FRAMES {
            return None;
        }
        let levels = &mut levels[..n];
        levels.sort_by(f64::total_cmp);
        let index = ((n - 1) as f64 * BACKGROUND_PERCENTILE).round() as usize;
        let bar = levels[index] + BACKGROUND_MARGIN_DB;
        Some(speaker_db.map_or(bar, |speaker| bar.min(speaker - BELOW_SPEAKER_DB)))
    }

    /// How loud a speaker heard from `start` to `end` (stream positions; the wake
    /// phrase) was: the mean of the loudest quarter of its smoothed levels. `None` when
    /// those frames are no longer (or not yet) here.
    pub fn speaker_db(&self, start: u64, end: u64) -> Option<f64> {
        let mut levels = [0.0f64; ROOM_FRAMES];
        let mut n = 0;
        for &(at, level) in self.frames.iter().take(self.filled) {
            if at > start && at <= end {
                levels[n] = level;
                n += 1;
            }
        }
        if n == 0 {
            return None;
        }
        let levels = &mut levels[..n];
        levels.sort_by(|a, b| b.total_cmp(a));
        let loud = &levels[..n.div_ceil(4)];
        Some(loud.iter().sum::<f64>() / loud.len() as f64)
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

    /// Speech must also clear `bar_db` (dBFS, from [`Room::bar_db`]; `None`: the noise
    /// floor alone decides). The bar holds a level smoothed over [`SMOOTH_FRAMES`],
    /// which clears it up to that much after a word began (and a soft beginning, the
    /// "st" of "stop", never does), so with a bar the start goes back by as much: the
    /// first word must reach Whisper whole. It can also start up to as much before it.
    pub fn with_bar(mut self, bar_db: Option<f64>) -> Endpointer {
        self.detector = self.detector.with_bar(bar_db);
        self
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

    /// Where speech started (samples from the first pushed), once it has.
    pub fn start(&self) -> Option<u64> {
        self.start
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
                        let lag = if self.detector.bar_db.is_some() {
                            SMOOTH_FRAMES as u64
                        } else {
                            0
                        };
                        let run = (u64::from(self.speech_run) + lag) * FRAME_SAMPLES as u64;
                        self.start = Some(self.position.saturating_sub(run));
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
        assert_eq!(e.start(), None);
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

    /// Noise that is loud for 200 ms, then 20 dB quieter for 200 ms, and so on: a
    /// background with dips, as other people talking or music have.
    fn bursts(seconds: f64, seed: &mut u32) -> Vec<f32> {
        (0..(16_000.0 * seconds) as usize)
            .map(|i| {
                *seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let level = if (i / 3200) % 2 == 0 { 0.05 } else { 0.005 };
                level * ((*seed >> 8) as f32 / (1 << 24) as f32 - 0.5)
            })
            .collect()
    }

    fn room_of(audio: &[f32]) -> Room {
        let mut room = Room::default();
        for (i, frame) in audio.chunks(FRAME_SAMPLES).enumerate() {
            room.push(frame, ((i + 1) * FRAME_SAMPLES) as u64);
        }
        room
    }

    #[test]
    fn the_room_sets_a_bar_at_its_loud_moments_within_reach_of_the_speaker() {
        let mut seed = 3;
        let background = bursts(2.0, &mut seed);
        let room = room_of(&background);
        let bar = room.bar_db(32_000, None).unwrap();
        let loud = room.speaker_db(0, 3200).unwrap();
        assert!((bar - loud - 2.0).abs() < 1.5, "bar {bar}, bursts {loud}");
        // The noise floor is at the dips: it takes the bursts for speech, the bar does not.
        let mut detector = Detector::new(settings().threshold_db);
        for frame in background.chunks(FRAME_SAMPLES) {
            detector.is_speech(frame, false);
        }
        let floor = detector.floor_db().unwrap();
        assert!(bar > floor + 15.0, "bar {bar}, floor {floor}");
        // A speaker barely louder than the bursts is still heard.
        assert_eq!(room.bar_db(32_000, Some(loud + 3.0)), Some(loud - 2.0));
        // Only the room before the utterance counts, and half a second of it at least.
        assert_eq!(room.bar_db(6_400, None), None);
        let quiet_half = room.bar_db(16_000, None).unwrap();
        assert!((quiet_half - bar).abs() < 1.5, "{quiet_half} {bar}");
        // A bounded history: a long room keeps its last 3 s.
        let long = room_of(&bursts(10.0, &mut seed));
        assert_eq!(long.speaker_db(0, 16_000 * 6), None);
    }

    #[test]
    fn over_a_background_with_dips_the_end_is_found_only_above_its_bar() {
        let mut seed = 5;
        let before = bursts(1.0, &mut seed);
        let room = room_of(&before);
        // Half a second of the bursts, a voice 10 dB over them for a second, then the
        // bursts go on.
        let mut audio = bursts(0.5, &mut seed);
        let mut voice = tone(1.0, 0.065);
        for (x, b) in voice.iter_mut().zip(bursts(1.0, &mut seed)) {
            *x += b;
        }
        audio.extend(voice);
        let voice_end = audio.len() as u64;
        audio.extend(bursts(4.0, &mut seed));
        let s = VadSettings {
            max_utterance_ms: 4_000,
            ..settings()
        };
        // The floor alone: the bursts stand far over their dips, the utterance never ends.
        let got = Endpointer::new(&s).push(&audio);
        assert!(matches!(got, Some(Endpoint::MaxLength { .. })), "{got:?}");
        let mut e = Endpointer::new(&s).with_bar(room.bar_db(16_000, None));
        let Some(Endpoint::Speech {
            end, detected_at, ..
        }) = e.push(&audio)
        else {
            panic!("{:?}", e.push(&[]));
        };
        assert!(end.abs_diff(voice_end) <= 3200, "{end}");
        assert!(detected_at - voice_end <= 16_000, "{detected_at}");
    }

    #[test]
    fn a_word_under_a_bar_keeps_its_soft_beginning() {
        // A quiet room, then a soft 120 ms onset ("st") under the bar and a loud vowel
        // over it: the smoothed level clears the bar only well into the vowel.
        let mut audio = vec![0.0; 16_000];
        let onset = audio.len() as u64;
        audio.extend(tone(0.12, 0.01));
        audio.extend(tone(0.3, 0.3));
        audio.extend(vec![0.0; 16_000]);
        let bar = Some(db(0.3f64.powi(2) / 2.0) - 5.0);
        let start_with = |bar| {
            let mut e = Endpointer::new(&settings()).with_bar(bar);
            match e.push(&audio) {
                Some(Endpoint::Speech { start, .. }) => start,
                other => panic!("{other:?}"),
            }
        };
        let floor_only = start_with(None);
        assert!(floor_only.abs_diff(onset) <= 640, "{floor_only} {onset}");
        // Some of the onset before the vowel is kept; the rest is in the margin a command
        // is cut with.
        let vowel = onset + 1920;
        let barred = start_with(bar);
        assert!(
            barred + 640 <= vowel && barred + 640 >= onset,
            "{barred} {onset}"
        );
        // Never further back than the smoothing explains: half a second of a hum over the
        // floor before the word does not become part of it.
        let mut hummed = vec![0.0; 16_000];
        hummed.extend(tone(0.5, 0.01));
        let word = hummed.len() as u64;
        hummed.extend(tone(0.3, 0.3));
        hummed.extend(vec![0.0; 16_000]);
        let mut e = Endpointer::new(&settings()).with_bar(bar);
        let Some(Endpoint::Speech { start, .. }) = e.push(&hummed) else {
            panic!("{:?}", e.push(&[]));
        };
        let most = word - (MIN_SPEECH_FRAMES as u64 + SMOOTH_FRAMES as u64) * FRAME_SAMPLES as u64;
        assert!(start >= most && start < word, "{start} {word}");
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
