//! From microphone frames to commands: wait for the wake word, then collect the
//! command until the speaker stops.
//!
//! A plain state machine over [`Frame`]s with no threads or clocks of its own, so
//! `run` (the microphone) and `listen` (a file) drive the same code, and tests can
//! drive it frame by frame. Positions are the capture's 16 kHz sample counts, so every
//! event says where in the audio it happened.
//!
//! Why the pre-roll: the detector fires a little after the wake word ends, and people
//! run the command on without a pause ("hey strawberry turn on the light"). The
//! command therefore starts where the wake word ended, and the audio between that
//! point and the moment of detection comes from the pre-roll.

use std::collections::VecDeque;

use crate::audio::{FRAME_SAMPLES, Frame, PreRoll, ms_to_samples};
use crate::stt::Transcript;
use crate::vad::{self, Endpoint, Endpointer, Room, VadSettings};
use crate::wake::{Detection, Detector};

/// Kept around the speech when it is cut out for Whisper, which does better with a
/// little silence on each side.
const MARGIN_MS: u64 = 100;

/// Audio from before a follow-up window that it starts with.
const FOLLOW_UP_LEAD_MS: u64 = 300;

/// What the listener heard.
#[derive(Debug, Clone, PartialEq)]
pub enum Heard {
    /// The wake word: a command follows.
    Woke(Detection),
    /// A whole command.
    Command(Command),
    /// Nobody spoke after the wake word (or in a follow-up window).
    NoSpeech {
        /// Where the wait ended.
        at: u64,
    },
    /// Someone started speaking over the spoke's ring ([`Listener::listen_over_ring`]):
    /// the ring makes way, so the rest of what they say is heard without it.
    Speaking {
        /// Where the speech started.
        at: u64,
    },
    /// The stop word over the spoke's ring ([`Listener::with_stop_word`]).
    Stop,
}

/// Frame levels of the last few seconds, for how loud the wake phrase was over this
/// room's noise: the signal that tells which of several spokes is nearest the speaker.
/// The detector's score says how much the audio sounds like the phrase, which a far
/// spoke can match as well as a near one; the level over the spoke's own floor falls
/// with distance.
#[derive(Debug, Default)]
struct Levels {
    /// (end position, level in dB) per frame, oldest first.
    frames: VecDeque<(u64, f32)>,
}

/// How much level history is kept: the phrase and a second or two before it.
const LEVEL_HISTORY: usize = 3 * 16_000 / FRAME_SAMPLES;

impl Levels {
    fn push(&mut self, frame: &Frame) {
        let n = frame.samples.len().max(1) as f32;
        let power = frame.samples.iter().map(|s| s * s).sum::<f32>() / n;
        if self.frames.len() == LEVEL_HISTORY {
            self.frames.pop_front();
        }
        self.frames
            .push_back((frame.end(), 10.0 * (power + 1e-12).log10()));
    }

    /// How far the loudest quarter of the frames in `start..end` is above the room's
    /// floor: the 10th percentile of the frames before them (or, when the history
    /// starts inside the phrase, of all frames: the gaps between its words). A
    /// percentile, not the minimum, so one dropped-out frame does not set the floor.
    fn proximity(&self, start: u64, end: u64) -> f32 {
        let mut phrase: Vec<f32> = self
            .frames
            .iter()
            .filter(|(at, _)| *at > start && *at <= end + FRAME_SAMPLES as u64)
            .map(|(_, db)| *db)
            .collect();
        if phrase.is_empty() {
            return 0.0;
        }
        phrase.sort_by(|a, b| b.total_cmp(a));
        let loud = &phrase[..phrase.len().div_ceil(4)];
        let level = loud.iter().sum::<f32>() / loud.len() as f32;
        let before: Vec<f32> = self
            .frames
            .iter()
            .filter(|(at, _)| *at <= start)
            .map(|(_, db)| *db)
            .collect();
        let mut pool: Vec<f32> = if before.len() >= 10 {
            before
        } else {
            self.frames.iter().map(|(_, db)| *db).collect()
        };
        pool.sort_by(f32::total_cmp);
        level - pool[pool.len() / 10]
    }
}

/// A command's audio and where it was in the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// 16 kHz mono samples of the command, with a little margin.
    pub samples: Vec<f32>,
    /// First sample of speech.
    pub start: u64,
    /// Just past the last sample of speech.
    pub end: u64,
    /// Where the end was decided (`end` plus the hangover).
    pub decided_at: u64,
    /// Cut at the maximum utterance length rather than ended by silence.
    pub cut: bool,
    /// Its transcript, when it was made while the speaker paused.
    pub transcript: Option<Transcript>,
}

/// The transcript made of a command while its speaker paused, kept for the command it
/// turns out to be: when the command ends where the pause began, that transcript is
/// its transcript, and whisper need not run again.
#[derive(Debug, Default)]
pub struct Guess(Option<(u64, Transcript)>);

impl Guess {
    /// Keeps the transcript of the paused command that ended at `end`.
    pub fn keep(&mut self, end: u64, transcript: Transcript) {
        self.0 = Some((end, transcript));
    }

    /// `heard` with the kept transcript, if it is this command's.
    pub fn attach(&mut self, heard: Heard) -> Heard {
        match heard {
            Heard::Command(mut command) => {
                if let Some((_, transcript)) = self.0.take().filter(|(end, _)| *end == command.end)
                {
                    command.transcript = Some(transcript);
                }
                Heard::Command(command)
            }
            other => other,
        }
    }
}

enum State {
    Waiting,
    Command {
        endpointer: Box<Endpointer>,
        /// Stream position of `audio[0]` (the endpointer counts from there).
        offset: u64,
        audio: Vec<f32>,
        /// A window over a ring ([`Listener::listen_over_ring`]).
        over_ring: bool,
        /// Says [`Heard::Speaking`] when speech starts (over a ring, once).
        announce: bool,
    },
}

/// Wake word, then command, then back to waiting.
pub struct Listener {
    detector: Detector,
    /// The stop word, heard only over a ring.
    stop: Option<Detector>,
    vad: VadSettings,
    preroll: PreRoll,
    state: State,
    /// Stream position just past the last frame seen.
    position: u64,
    levels: Levels,
    /// The room as the end-of-speech detector hears it: what a command must be louder than.
    room: Room,
    /// How loud the last wake phrase was ([`Room::speaker_db`]): a follow-up window has no
    /// phrase of its own, and is most likely answered by the same person.
    speaker_db: Option<f64>,
    /// The bar of the last woken command: the room before anyone spoke to the spoke.
    wake_bar: Option<f64>,
}

impl Listener {
    /// A listener that keeps `pre_roll_ms` of audio before each trigger.
    pub fn new(detector: Detector, vad: VadSettings, pre_roll_ms: u64) -> Listener {
        Listener {
            detector,
            stop: None,
            vad,
            preroll: PreRoll::new(ms_to_samples(pre_roll_ms).max(FRAME_SAMPLES)),
            state: State::Waiting,
            position: 0,
            levels: Levels::default(),
            room: Room::default(),
            speaker_db: None,
            wake_bar: None,
        }
    }

    /// Listens for `stop` (a stop word's detector) over a ring, beside the window's
    /// command: hearing it ends the window at once ([`Heard::Stop`]). Why beside Whisper:
    /// what the canceller leaves of the ring's own words is in every clip Whisper reads
    /// there, and it read a person's "stop" as "time" or "star" about half the time; a
    /// spotter trained on "stop" over rings' residual echo hears the word alone.
    pub fn with_stop_word(mut self, stop: Option<Detector>) -> Listener {
        self.stop = stop;
        self
    }

    /// Whether it is waiting for the wake word (not collecting a command).
    pub fn waiting(&self) -> bool {
        matches!(self.state, State::Waiting)
    }

    /// Whether the frames that follow come out of an echo canceller taking played sound
    /// out ([`Detector::set_over_echo`]).
    pub fn set_over_echo(&mut self, over_echo: bool) {
        self.detector.set_over_echo(over_echo);
    }

    /// Whether it listens over a ring ([`listen_over_ring`](Self::listen_over_ring)).
    pub fn over_ring(&self) -> bool {
        matches!(
            self.state,
            State::Command {
                over_ring: true,
                ..
            }
        )
    }

    /// Stream position just past the last frame given.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Listens for a command now, without the wake word, giving up after `no_speech_ms`
    /// of silence (a follow-up answer).
    pub fn listen(&mut self, no_speech_ms: u64) {
        self.open_window(no_speech_ms, false);
    }

    /// Listens for "stop" while the spoke's ring plays, giving up after `no_speech_ms` of
    /// silence. What is left of the ring's echo after the canceller comes and goes with
    /// its words, tens of dB over a quiet room, and would open utterances of its own that
    /// swallow the person's word; it stays well under a person speaking to the spoke, so
    /// here speech must be within [`vad::BELOW_SPEAKER_DB`] of the last wake phrase's
    /// level (the room's bar when no phrase was heard). Speech that starts is reported
    /// ([`Heard::Speaking`]) so the ring can make way for it.
    pub fn listen_over_ring(&mut self, no_speech_ms: u64) {
        // The stop word hears each window afresh: it heard nothing between windows, and
        // after a detection it would spend the next window's first half second re-arming.
        if let Some(stop) = &mut self.stop {
            stop.reset();
        }
        self.open_window(no_speech_ms, true);
    }

    fn open_window(&mut self, no_speech_ms: u64, over_ring: bool) {
        // The window must outlast the lead-in it starts with, or it would end at once.
        let vad = VadSettings {
            no_speech_timeout_ms: no_speech_ms.max(FOLLOW_UP_LEAD_MS + 200),
            ..self.vad.clone()
        };
        // The endpointer learns the room's noise floor from what it hears first: give
        // it the moments just before, or an answer that starts at once is taken for
        // the floor. (Speech that began in them belongs to the answer anyway.)
        let (held_from, held) = self.preroll.contents();
        let keep = ms_to_samples(FOLLOW_UP_LEAD_MS).min(held.len());
        let audio = held[held.len() - keep..].to_vec();
        let offset = held_from + (held.len() - keep) as u64;
        // The room before the window (not the lead-in, which may hold the answer's start),
        // but no higher than before the last wake phrase: a window opens after a reply, and
        // what the microphone heard of it is not the room.
        let room = self
            .room
            .bar_db(offset, self.speaker_db)
            .map(|bar| self.wake_bar.map_or(bar, |wake| bar.min(wake)));
        let bar = match self.speaker_db {
            Some(speaker) if over_ring => Some(speaker - vad::BELOW_SPEAKER_DB),
            _ => room,
        };
        let mut endpointer = Endpointer::new(&vad).with_bar(bar);
        let decided = endpointer.push(&audio);
        debug_assert!(decided.is_none());
        self.state = State::Command {
            endpointer: Box::new(endpointer),
            offset,
            audio,
            over_ring,
            announce: over_ring,
        };
    }

    /// Stops collecting a command and waits for the wake word again.
    pub fn cancel(&mut self) {
        self.state = State::Waiting;
        self.detector.reset();
    }

    /// Takes one frame; returns what it completed, if anything.
    pub fn push(&mut self, frame: &Frame) -> Option<Heard> {
        self.position = frame.end();
        self.preroll.push(frame);
        self.levels.push(frame);
        self.room.push(&frame.samples, frame.end());
        // Counted only once speech over the bar has started: the ring's own residual stays
        // under it, so the word cannot be taken from the ring.
        let stopped = match (&mut self.stop, &self.state) {
            (
                Some(stop),
                State::Command {
                    over_ring: true,
                    endpointer,
                    ..
                },
            ) => !stop.process(&frame.samples).is_empty() && endpointer.start().is_some(),
            _ => false,
        };
        if stopped {
            self.cancel();
            return Some(Heard::Stop);
        }
        match &mut self.state {
            State::Waiting => {
                // The detector counts only what it was given; it skipped the commands
                // (and any audio lost to a reopened device), so its positions lag the
                // stream's by what it did not see.
                let lag = frame.start.saturating_sub(self.detector.position());
                let mut detection = self.detector.process(&frame.samples).into_iter().next()?;
                detection.start += lag;
                detection.end += lag;
                detection.fired_at += lag;
                detection.proximity_db = self.levels.proximity(detection.start, detection.end);
                self.start_command(&detection);
                Some(Heard::Woke(detection))
            }
            State::Command {
                endpointer,
                offset,
                audio,
                announce,
                ..
            } => {
                audio.extend_from_slice(&frame.samples);
                let Some(endpoint) = endpointer.push(&frame.samples) else {
                    let start = endpointer.start().filter(|_| *announce)?;
                    *announce = false;
                    return Some(Heard::Speaking {
                        at: *offset + start,
                    });
                };
                let (offset, audio) = (*offset, std::mem::take(audio));
                self.cancel();
                Some(finish(endpoint, offset, &audio))
            }
        }
    }

    /// The command so far when its speaker has just paused long enough for a look at
    /// the words (once per pause; only with `vad.mid_sentence_ms`): whoever can
    /// transcribe it calls [`finish`](Self::finish) when they sound finished.
    pub fn take_pause(&mut self) -> Option<Command> {
        let State::Command {
            endpointer,
            offset,
            audio,
            ..
        } = &mut self.state
        else {
            return None;
        };
        let (start, end) = endpointer.take_pause()?;
        Some(cut(audio, *offset, start, end, audio.len() as u64, false))
    }

    /// The command paused at stream position `end` ([`take_pause`](Self::take_pause)) sounds
    /// finished: it ends once `vad.hangover_ms` of silence follows `end`, returned
    /// here if that has passed already. Ignored when the speaker went on, or the
    /// command is over.
    pub fn finish(&mut self, end: u64) -> Option<Heard> {
        let State::Command {
            endpointer,
            offset,
            audio,
            ..
        } = &mut self.state
        else {
            return None;
        };
        let endpoint = endpointer.finish(end.checked_sub(*offset)?)?;
        let (offset, audio) = (*offset, std::mem::take(audio));
        self.cancel();
        Some(finish(endpoint, offset, &audio))
    }

    /// The command starts where the wake word ended; what came since is in the pre-roll.
    /// The command must be louder than the room before the phrase, within reach of the
    /// phrase's own level (its start goes back by the lag of the level held against that
    /// bar: [`Endpointer::with_bar`]).
    fn start_command(&mut self, detection: &Detection) {
        let speaker = self.room.speaker_db(detection.start, detection.end);
        if speaker.is_some() {
            self.speaker_db = speaker;
        }
        let bar = self.room.bar_db(detection.start, speaker);
        self.wake_bar = bar;
        let mut endpointer = Endpointer::new(&self.vad).with_bar(bar);
        let (held_from, held) = self.preroll.contents();
        let from = detection.end.max(held_from);
        let skip = usize::try_from(from - held_from)
            .unwrap_or(usize::MAX)
            .min(held.len());
        let audio = held[skip..].to_vec();
        let decided = endpointer.push(&audio);
        self.state = State::Command {
            endpointer: Box::new(endpointer),
            offset: from,
            audio,
            over_ring: false,
            announce: false,
        };
        // A command cannot end inside the few hundred milliseconds of pre-roll after
        // the wake word (the no-speech timeout is far longer), so `decided` is None.
        debug_assert!(decided.is_none());
        self.detector.reset();
    }
}

/// Turns an endpoint into what was heard, with the speech cut out of `audio`.
fn finish(endpoint: Endpoint, offset: u64, audio: &[f32]) -> Heard {
    match endpoint {
        Endpoint::Speech {
            start,
            end,
            detected_at,
        } => Heard::Command(cut(audio, offset, start, end, detected_at, false)),
        Endpoint::MaxLength {
            start: Some(start),
            at,
        } => Heard::Command(cut(audio, offset, start, at, at, true)),
        Endpoint::MaxLength { start: None, at } | Endpoint::NoSpeech { at } => {
            Heard::NoSpeech { at: offset + at }
        }
    }
}

/// The command spoken from `start` to `end` in `audio` (positions relative to it,
/// which begins at stream position `offset`), with a margin on each side.
fn cut(audio: &[f32], offset: u64, start: u64, end: u64, decided_at: u64, cut: bool) -> Command {
    let margin = ms_to_samples(MARGIN_MS);
    let from = usize::try_from(start)
        .unwrap_or(usize::MAX)
        .saturating_sub(margin);
    let to = usize::try_from(end)
        .unwrap_or(usize::MAX)
        .saturating_add(margin)
        .min(audio.len());
    Command {
        samples: audio[from.min(to)..to].to_vec(),
        start: offset + start,
        end: offset + end,
        decided_at: offset + decided_at,
        cut,
        transcript: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audio::wav::frames;

    fn noise(n: usize, amp: f32, seed: &mut u32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                amp * ((*seed >> 8) as f32 / (1 << 24) as f32 - 0.5)
            })
            .collect()
    }

    fn listener() -> Listener {
        let word = crate::wake::WakeWord::bundled().unwrap();
        let detector = Detector::with_word(&crate::wake::Settings::default(), &word).unwrap();
        Listener::new(detector, VadSettings::default(), 1_000)
    }

    fn tone(n: usize, amp: f32) -> Vec<f32> {
        (0..n).map(|i| amp * (i as f32 * 0.2).sin()).collect()
    }

    /// `samples` heard after what `l` has heard so far.
    fn push(l: &mut Listener, samples: &[f32]) -> Vec<Heard> {
        let at = l.position();
        frames(samples, at).filter_map(|f| l.push(&f)).collect()
    }

    /// A quiet room for 2 s, then a tone at 0.3: when `woken`, the wake phrase (the
    /// detector's verdict is given here) whose command is then cancelled.
    fn after_a_wake_phrase(woken: bool, seed: &mut u32) -> Listener {
        let mut l = listener();
        push(&mut l, &noise(32_000, 0.002, seed));
        push(&mut l, &tone(16_000, 0.3));
        if woken {
            l.start_command(&Detection {
                name: "test".into(),
                score: 1.0,
                avg_score: 1.0,
                start: 32_000,
                end: 48_000,
                fired_at: 48_000,
                frames: 1,
                proximity_db: 0.0,
            });
            l.cancel();
        }
        l
    }

    #[test]
    fn a_follow_up_collects_a_command_without_the_wake_word() {
        let mut l = listener();
        let mut seed = 1;
        let mut audio = noise(16_000, 0.002, &mut seed);
        let voiced: Vec<f32> = (0..16_000)
            .map(|i| 0.3 * (i as f32 * 0.07).sin() * (i as f32 * 0.0011).sin().abs())
            .collect();
        audio.extend(voiced);
        audio.extend(noise(16_000, 0.002, &mut seed));
        // A second of room noise first, so the noise floor is known.
        let mut heard = Vec::new();
        for (i, frame) in frames(&audio, 0).enumerate() {
            if i == 40 {
                l.listen(3_000);
                assert!(!l.waiting());
            }
            heard.extend(l.push(&frame));
        }
        assert_eq!(heard.len(), 1, "{heard:?}");
        let Heard::Command(c) = &heard[0] else {
            panic!("{heard:?}")
        };
        assert!(!c.cut);
        // From up to 160 ms before the voice (the bar's lag, `Endpointer::with_bar`).
        assert!((12_400..17_500).contains(&c.start), "start {}", c.start);
        assert!((31_000..33_000).contains(&c.end), "end {}", c.end);
        assert!(c.decided_at >= c.end);
        assert!(c.samples.len() as u64 >= c.end - c.start);
        assert!(l.waiting());
    }

    #[test]
    fn silence_after_a_follow_up_is_no_speech() {
        let mut l = listener();
        let mut seed = 7;
        let audio = noise(16_000 * 3, 0.002, &mut seed);
        l.listen(1_000);
        let heard: Vec<Heard> = frames(&audio, 0).filter_map(|f| l.push(&f)).collect();
        assert_eq!(heard.len(), 1, "{heard:?}");
        assert!(matches!(heard[0], Heard::NoSpeech { at } if (15_000..18_000).contains(&at)));
    }

    #[test]
    fn a_follow_up_after_a_loud_reply_is_judged_against_the_room_before_the_wake_phrase() {
        // Bursts 20 dB apart every 200 ms: what the microphone hears of the spoke's reply.
        let reply = |seconds: usize, seed: &mut u32| -> Vec<f32> {
            (0..seconds * 16_000 / 3200)
                .flat_map(|k| noise(3200, if k % 2 == 0 { 0.5 } else { 0.05 }, seed))
                .collect()
        };
        let hear = |woken: bool| {
            let mut seed = 11;
            let mut l = after_a_wake_phrase(woken, &mut seed);
            push(&mut l, &reply(2, &mut seed));
            // The answer, 10 dB under the phrase: clear of the quiet room, not of the reply.
            l.listen(3_000);
            let start = l.position();
            let mut heard = push(&mut l, &noise(3200, 0.002, &mut seed));
            heard.extend(push(&mut l, &tone(16_000, 0.095)));
            heard.extend(push(&mut l, &noise(32_000, 0.002, &mut seed)));
            (heard, start + 3200, start + 3200 + 16_000)
        };
        let (heard, start, end) = hear(true);
        let [Heard::Command(c)] = heard.as_slice() else {
            panic!("{heard:?}")
        };
        // From up to 160 ms before the answer (the bar's lag, `Endpointer::with_bar`).
        assert!(
            (start - 2560 - 1600..=start + 1600).contains(&c.start),
            "{} {start}",
            c.start
        );
        assert!(c.end.abs_diff(end) <= 3200, "{} {end}", c.end);
        // Without a wake phrase to go by, the reply is taken for the room.
        let (heard, _, _) = hear(false);
        assert!(
            matches!(heard.as_slice(), [Heard::NoSpeech { .. }]),
            "{heard:?}"
        );
    }

    #[test]
    fn over_a_ring_only_someone_as_loud_as_the_last_speaker_is_heard_and_announced() {
        let mut seed = 13;
        let mut l = after_a_wake_phrase(true, &mut seed);
        push(&mut l, &noise(16_000, 0.002, &mut seed));
        l.listen_over_ring(4_000);
        assert!(l.over_ring());
        // What is left of the ring's echo, 15 dB under the speaker: not speech here.
        let residual = push(&mut l, &tone(24_000, 0.05));
        assert!(residual.is_empty(), "{residual:?}");
        // The speaker again: announced once when it starts, then the command.
        let start = l.position();
        let mut heard = push(&mut l, &tone(8_000, 0.3));
        heard.extend(push(&mut l, &noise(16_000, 0.002, &mut seed)));
        let [Heard::Speaking { at }, Heard::Command(c)] = heard.as_slice() else {
            panic!("{heard:?}")
        };
        assert!(at.abs_diff(start) <= 3200, "{at} {start}");
        assert_eq!(*at, c.start);
        assert!(!l.over_ring());
        // A follow-up window hears the same residual as speech (its bar is the room's).
        l.listen(4_000);
        assert!(!l.over_ring());
        let mut heard = push(&mut l, &tone(24_000, 0.05));
        heard.extend(push(&mut l, &noise(16_000, 0.002, &mut seed)));
        assert!(matches!(heard.as_slice(), [Heard::Command(_)]), "{heard:?}");
    }

    #[test]
    fn proximity_is_the_phrase_over_the_rooms_floor() {
        let frame = |start: u64, samples: Vec<f32>| Frame { start, samples };
        let at_level = |tone_amp: f32, noise_amp: f32| {
            let mut levels = Levels::default();
            let mut seed = 7;
            let n = FRAME_SAMPLES as u64;
            for i in 0..200u64 {
                let mut samples = noise(FRAME_SAMPLES, noise_amp, &mut seed);
                if (150..180).contains(&i) {
                    for (k, s) in samples.iter_mut().enumerate() {
                        *s += tone_amp * (k as f32 * 0.3).sin();
                    }
                }
                levels.push(&frame(i * n, samples));
            }
            levels.proximity(150 * n, 180 * n)
        };
        let near = at_level(0.5, 0.01);
        let far = at_level(0.5 * 10f32.powf(-12.0 / 20.0), 0.01);
        assert!((near - far - 12.0).abs() < 1.0, "near {near} far {far}");
        // The same phrase in a noisier room stands out less.
        let noisy = at_level(0.5, 0.1);
        assert!(near - noisy > 15.0, "quiet room {near}, noisy room {noisy}");
    }
}
