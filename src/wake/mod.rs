//! The wake word: listening for "hey strawberry" (or the user's own phrase) in the
//! microphone stream.
//!
//! Why rustpotter, and why its *reference* wake words: a reference word is a handful of
//! recordings of the phrase turned into MFCC feature sequences; detection compares the
//! live stream against each of them with dynamic time warping. That needs no model
//! download and no training run, a user can make their own word from a few recordings
//! in a second. Its weakness is that it matches voices like the recorded ones best,
//! which is why the bundled word is built from several voices and speeds, and why
//! `wakeword train` exists.
//!
//! rustpotter reads and makes the word files; the scoring itself is done by
//! `engine.rs`, which computes exactly rustpotter's scores at about a quarter of the
//! cost (1.0% of one core with the bundled word on the development machine, against
//! 3.5% through rustpotter's own detector; BENCHMARKS.md).
//!
//! Neural words (`neural.rs`, trained by `src/wake/train-neural/`) are the other kind:
//! a small network trained on thousands of synthetic voices, for voices no recording
//! resembles. The bundled neural "hey strawberry" is the default: on held-out voices it
//! hears far more phrases than the bundled reference word in every room and wakes
//! falsely less often (docs/wake-word.md); `wake.bundled` chooses. Both kinds sit behind
//! the same [`Detector`].
//!
//! The detector takes 16 kHz mono f32 audio in chunks of any length (the audio module
//! hands over whatever its callback produced) and buffers it to 30 ms frames. Each [`Detection`] says where in the stream the phrase was (sample offsets),
//! not only that it was heard: the recorder needs to know where the command starts.
//!
//! One [`Detector`] can hold several words (e.g. the wake word and a "stop" word); while
//! the spoke speaks, the daemon can feed a second detector holding only "stop" and call
//! [`Detector::reset`] on the wake detector before it listens again, so that audio from
//! before the pause never combines with audio after it.

mod engine;
mod neural;
pub mod train;

use std::path::{Path, PathBuf};

use rustpotter::{WakewordLoad, WakewordModel, WakewordRef, WakewordSave};
use serde::{Deserialize, Serialize};

use engine::Engine;
pub use neural::{ECHO_GAP, Trace};

use crate::stt::audio::AudioError;

/// The rate the detector works at (the same as speech to text).
pub const SAMPLE_RATE: u32 = crate::stt::SAMPLE_RATE;

/// Samples in one rustpotter frame: 30 ms at 16 kHz.
pub const FRAME_SAMPLES: usize = 480;

/// Samples between two feature vectors: 10 ms. Feature-sequence lengths are counted in
/// these.
const SHIFT_SAMPLES: u64 = 160;

/// The bundled reference word "hey strawberry", made from espeak-ng voices by
/// `src/wake/make-hey-strawberry.sh` (see its header for how to regenerate it).
pub const BUNDLED_REFERENCE: &[u8] = include_bytes!("hey_strawberry.rpw");

/// The bundled neural word "hey strawberry", trained by `src/wake/train-neural/run.sh`
/// (see its header for how to regenerate it).
pub const BUNDLED_NEURAL: &[u8] = include_bytes!("hey_strawberry.wake");

/// The bundled stop word "stop", a spotter the daemon runs while a timer rings, trained
/// by `src/wake/train-neural/stop.py` (see its header for why and how).
pub const BUNDLED_STOP: &[u8] = include_bytes!("stop.wake");

/// The bundled word's phrase.
pub const BUNDLED_NAME: &str = "hey strawberry";

/// Why a wake word could not be loaded, made or used. Each names the file or recording
/// and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum WakeError {
    /// The wake word file could not be read.
    #[error("cannot read the wake word file {origin}: {source}")]
    Read {
        origin: String,
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a rustpotter wake word.
    #[error(
        "{origin}: not a rustpotter wake word file ({message}); make one with `strawberry-spoke wakeword train`"
    )]
    Format { origin: String, message: String },
    /// A rustpotter neural-network wake word: this build only uses reference words.
    #[error(
        "{origin}: a rustpotter neural-network wake word model; only reference wake words are supported: make one with `strawberry-spoke wakeword train`"
    )]
    Unsupported { origin: String },
    /// The file parsed but its contents cannot work (e.g. empty or inconsistent).
    #[error(
        "{origin}: broken wake word file: {message}; make it again with `strawberry-spoke wakeword train`"
    )]
    Invalid { origin: String, message: String },
    /// A neural wake word file that cannot work.
    #[error(
        "{origin}: broken neural wake word file: {message}; remove wake.file to use the bundled word, or make the file again with src/wake/train-neural/run.sh"
    )]
    Neural { origin: String, message: String },
    /// The wake word file could not be written.
    #[error("cannot write the wake word file {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A training recording could not be read.
    #[error(transparent)]
    Audio(#[from] AudioError),
    /// Too few recordings to train from.
    #[error(
        "{got} recording(s) of the wake word given, at least {need} are needed (5-10 work better): record the phrase several times, one WAV file each"
    )]
    TooFewSamples { got: usize, need: usize },
    /// A training recording holds no sound.
    #[error(
        "{path}: silent (loudest 10 ms at {loudest_dbfs:.0} dBFS): check the microphone and its volume, and record the phrase again"
    )]
    Silent { path: PathBuf, loudest_dbfs: f32 },
    /// A training recording holds sound, but nothing stands out from the background.
    #[error(
        "{path}: no speech stands out from the background noise (loudest part only {contrast_db:.0} dB above the quietest): record in a quieter place or closer to the microphone"
    )]
    NoSpeech { path: PathBuf, contrast_db: f32 },
    /// The speech in a training recording is too short or too long to be a wake phrase.
    #[error(
        "{path}: {seconds:.2} s of speech, a wake phrase takes {min:.2}-{max:.1} s: record just the phrase, once per file"
    )]
    Length {
        path: PathBuf,
        seconds: f32,
        min: f32,
        max: f32,
    },
    /// Detector settings that cannot work.
    #[error("wake word setting {key}: {message}")]
    Setting { key: &'static str, message: String },
    /// The detector refused a word (e.g. two words with different feature sizes).
    #[error("wake word {name:?}: {message}")]
    Detector { name: String, message: String },
}

/// The two bundled "hey strawberry" words (`wake.bundled`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bundled {
    /// Templates of ten espeak-ng voices (rustpotter's reference word): the default
    /// until it measured worse than the neural word in every room and in false wakes.
    Reference,
    /// The keyword spotter trained on synthetic voices (`src/wake/train-neural/`).
    #[default]
    Neural,
}

/// A wake word: a reference word (a name and the feature sequences of its
/// recordings, rustpotter's format) or a neural one (`neural.rs`).
pub struct WakeWord {
    kind: Kind,
}

enum Kind {
    Reference(WakewordRef),
    Neural(std::sync::Arc<neural::Model>),
}

impl std::fmt::Debug for WakeWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeWord")
            .field("name", &self.name())
            .field("neural", &self.is_neural())
            .field("recordings", &self.recordings())
            .finish_non_exhaustive()
    }
}

impl WakeWord {
    /// The bundled "hey strawberry" (the default of the two).
    pub fn bundled() -> Result<WakeWord, WakeError> {
        WakeWord::bundled_of(Bundled::default())
    }

    /// One of the two bundled "hey strawberry" words.
    pub fn bundled_of(which: Bundled) -> Result<WakeWord, WakeError> {
        match which {
            Bundled::Reference => WakeWord::bundled_reference(),
            Bundled::Neural => WakeWord::bundled_neural(),
        }
    }

    /// The bundled reference word (templates from ten espeak-ng voices).
    pub fn bundled_reference() -> Result<WakeWord, WakeError> {
        WakeWord::from_bytes(BUNDLED_REFERENCE, "the bundled reference wake word")
    }

    /// The bundled neural word.
    pub fn bundled_neural() -> Result<WakeWord, WakeError> {
        WakeWord::from_bytes(BUNDLED_NEURAL, "the bundled neural wake word")
    }

    /// The bundled stop word ([`BUNDLED_STOP`]).
    pub fn bundled_stop() -> Result<WakeWord, WakeError> {
        WakeWord::from_bytes(BUNDLED_STOP, "the bundled stop word")
    }

    /// Reads a wake word file (`.rpw`, as `wakeword train` or rustpotter's `build` make).
    pub fn load(path: &Path) -> Result<WakeWord, WakeError> {
        let origin = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| WakeError::Read {
            origin: origin.clone(),
            source,
        })?;
        WakeWord::from_bytes(&bytes, &origin)
    }

    /// Parses a wake word; `origin` names where the bytes came from in errors.
    pub fn from_bytes(bytes: &[u8], origin: &str) -> Result<WakeWord, WakeError> {
        if bytes.starts_with(neural::MAGIC) {
            return neural::Model::parse(bytes)
                .map(|m| WakeWord {
                    kind: Kind::Neural(std::sync::Arc::new(m)),
                })
                .map_err(|message| WakeError::Neural {
                    origin: origin.into(),
                    message,
                });
        }
        match WakewordRef::load_from_buffer(bytes) {
            Ok(inner) => WakeWord::checked(inner, origin),
            Err(message) => {
                // Only to say the right thing: a neural model parses as one.
                if WakewordModel::load_from_buffer(bytes).is_ok() {
                    return Err(WakeError::Unsupported {
                        origin: origin.into(),
                    });
                }
                Err(WakeError::Format {
                    origin: origin.into(),
                    message,
                })
            }
        }
    }

    /// Checks what the file format takes on trust: the engine slices each template into
    /// vectors of the stated feature size and compares them element by element, so an
    /// empty or ragged file would panic (or silently never match) later, inside the audio
    /// path.
    fn checked(mut inner: WakewordRef, origin: &str) -> Result<WakeWord, WakeError> {
        let invalid = |message: String| WakeError::Invalid {
            origin: origin.into(),
            message,
        };
        let size = usize::from(inner.mfcc_size);
        if size == 0 {
            return Err(invalid("feature size 0".into()));
        }
        if inner.samples_features.is_empty() {
            return Err(invalid("no recordings in it".into()));
        }
        let sequences = inner
            .samples_features
            .iter()
            .map(|(name, s)| (name.as_str(), s))
            .chain(inner.avg_features.iter().map(|s| ("(average)", s)));
        for (name, frames) in sequences {
            if frames.is_empty() {
                return Err(invalid(format!("recording {name:?} has no features")));
            }
            if let Some(bad) = frames.iter().find(|f| f.len() != size) {
                return Err(invalid(format!(
                    "recording {name:?} has features of size {}, the file says {size}",
                    bad.len()
                )));
            }
            if frames.iter().flatten().any(|v| !v.is_finite()) {
                return Err(invalid(format!(
                    "recording {name:?} has non-finite features"
                )));
            }
        }
        if !inner.rms_level.is_finite() || inner.rms_level < 0.0 {
            inner.rms_level = 0.0;
        }
        // Thresholds stored in the file would silently override `wake.threshold`: the
        // configuration is the one place sensitivity is set.
        inner.threshold = None;
        inner.avg_threshold = None;
        Ok(WakeWord {
            kind: Kind::Reference(inner),
        })
    }

    pub(crate) fn from_ref(inner: WakewordRef, origin: &str) -> Result<WakeWord, WakeError> {
        WakeWord::checked(inner, origin)
    }

    /// The phrase's name (e.g. "hey strawberry"); detections carry it.
    pub fn name(&self) -> &str {
        match &self.kind {
            Kind::Reference(r) => &r.name,
            Kind::Neural(m) => m.name(),
        }
    }

    /// Whether this is a neural word (trained by `src/wake/train-neural/`) rather than
    /// a reference word made from recordings.
    pub fn is_neural(&self) -> bool {
        matches!(self.kind, Kind::Neural(_))
    }

    /// How many recordings the word was made from (0 for a neural word).
    pub fn recordings(&self) -> usize {
        match &self.kind {
            Kind::Reference(r) => r.samples_features.len(),
            Kind::Neural(_) => 0,
        }
    }

    /// The longest stretch of audio one decision looks at, in samples at 16 kHz: the
    /// longest recording of a reference word, the receptive field of a neural one.
    pub fn longest_samples(&self) -> u64 {
        match &self.kind {
            Kind::Reference(r) => {
                let frames = r.samples_features.values().map(Vec::len).max();
                frames.unwrap_or(0) as u64 * SHIFT_SAMPLES
            }
            Kind::Neural(m) => m.receptive_samples(),
        }
    }

    /// The threshold this word uses with these settings: `threshold` when set, else
    /// the sensitivity's (measured per model for a neural word; a word with companion
    /// networks gives its main network's, and an expert's `threshold` runs the main
    /// network alone).
    pub fn threshold(&self, settings: &Settings) -> f32 {
        match (&self.kind, settings.threshold) {
            (_, Some(t)) => t,
            (Kind::Reference(_), None) => settings.sensitivity.reference_threshold(),
            (Kind::Neural(m), None) => m.threshold(settings.sensitivity),
        }
    }

    /// A neural word's log-mel features and its main network's score logits, frame by
    /// frame, over a clip heard from a fresh start (`None` for a reference word). For
    /// checking the Rust network against the training script's, and for evaluations.
    pub fn trace(&self, samples: &[f32]) -> Option<Trace> {
        match &self.kind {
            Kind::Reference(_) => None,
            Kind::Neural(m) => Some(
                neural::Runner::new(m.clone(), neural::Listen::Threshold(1.0), 0).trace(samples),
            ),
        }
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, WakeError> {
        match &self.kind {
            Kind::Reference(r) => r.save_to_buffer().map_err(|message| WakeError::Invalid {
                origin: format!("wake word {:?}", self.name()),
                message,
            }),
            Kind::Neural(m) => Ok(m.bytes().to_vec()),
        }
    }

    /// Writes the word to `path` (atomically: a half-written file never replaces a
    /// working one).
    pub fn save(&self, path: &Path) -> Result<(), WakeError> {
        let bytes = self.to_bytes()?;
        let write_err = |source| WakeError::Write {
            path: path.to_path_buf(),
            source,
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(write_err)?;
        std::io::Write::write_all(&mut tmp, &bytes).map_err(write_err)?;
        // Temporary files are private; a wake word is read by the service's own user.
        tmp.as_file()
            .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .map_err(write_err)?;
        tmp.persist(path).map_err(|e| write_err(e.error))?;
        Ok(())
    }
}

/// How the per-recording scores combine into one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScoreMode {
    /// The best-matching recording decides (rustpotter's default).
    Max,
    /// The mean over the recordings.
    Average,
    /// The median over the recordings.
    Median,
    /// Percentiles over the recordings: higher is closer to `max`.
    P25,
    P75,
    P80,
    P90,
    P95,
}

/// rustpotter's voice-activity gate: frames it takes for silence are not scored at all
/// (less CPU in a quiet room); `easy` lets the most through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vad {
    /// Score every frame.
    Off,
    Easy,
    Medium,
    Hard,
}

/// How eagerly the word is heard, for people rather than experts: each level is an
/// operating point (false wakes per hour against detection) measured for the bundled
/// word; `threshold` overrides it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sensitivity {
    /// Fewest false wakes; the phrase may need saying clearly.
    Low,
    #[default]
    Medium,
    /// Hears more (quieter, farther, noisier), wakes by mistake more often.
    High,
}

impl Sensitivity {
    /// For reference words: today's threshold at medium, 0.04 either side (not measured
    /// per word: a word made from someone's recordings has no held-out voices).
    fn reference_threshold(self) -> f32 {
        match self {
            Sensitivity::Low => 0.60,
            Sensitivity::Medium => 0.56,
            Sensitivity::High => 0.52,
        }
    }
}

/// Detector settings (`[wake]` in the config).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// How eagerly words are heard when `threshold` is not set.
    pub sensitivity: Sensitivity,
    /// Score (0-1) a stretch of audio needs to count, for experts: overrides
    /// `sensitivity` for every word.
    pub threshold: Option<f32>,
    /// Score against the averaged recording below which a frame is not compared with
    /// each recording (saves CPU; 0 disables the gate).
    pub avg_threshold: f32,
    /// Consecutive frames over the threshold before a detection fires: fewer is
    /// faster and more sensitive, more is safer.
    pub min_scores: usize,
    /// How per-recording scores combine.
    pub score_mode: ScoreMode,
    /// The DTW cost that maps to a score of 0.5; higher is more lenient.
    pub score_ref: f32,
    /// The DTW band width, in frames.
    pub band_size: u16,
    /// The voice-activity gate.
    pub vad: Vad,
    /// Scale the input towards the recordings' level (for quiet or distant speakers).
    pub gain_normalizer: bool,
    /// Fire as soon as `min_scores` frames scored, instead of waiting for the best one
    /// (earlier, but the reported position is less exact).
    pub eager: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            // For reference words medium is 0.56, tuned on espeak-ng voices
            // (tests/wake.rs): unseen voices scored 0.59-0.71, the best stretch of 12
            // minutes of other speech 0.58 with too few frames over this to fire.
            // rustpotter's own default, 0.5, woke ~2 times a minute.
            sensitivity: Sensitivity::Medium,
            threshold: None,
            avg_threshold: 0.2,
            min_scores: 5,
            score_mode: ScoreMode::Max,
            score_ref: 0.22,
            band_size: 5,
            vad: Vad::Off,
            gain_normalizer: false,
            eager: false,
        }
    }
}

impl Settings {
    /// Rejects values that parse but cannot work.
    pub fn check(&self) -> Result<(), WakeError> {
        let unit = |key, v: f32| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(WakeError::Setting {
                    key,
                    message: format!("{v} is not in 0-1"),
                })
            }
        };
        if let Some(t) = self.threshold {
            unit("threshold", t)?;
        }
        unit("avg_threshold", self.avg_threshold)?;
        if !(self.score_ref.is_finite() && self.score_ref > 0.0) {
            return Err(WakeError::Setting {
                key: "score_ref",
                message: format!("{} must be greater than 0", self.score_ref),
            });
        }
        if self.min_scores == 0 {
            return Err(WakeError::Setting {
                key: "min_scores",
                message: "must be at least 1".into(),
            });
        }
        if self.band_size == 0 {
            return Err(WakeError::Setting {
                key: "band_size",
                message: "must be at least 1".into(),
            });
        }
        Ok(())
    }
}

/// One time a word was heard.
#[derive(Debug, Clone, PartialEq)]
pub struct Detection {
    /// The word's name.
    pub name: String,
    /// The score (0-1) of the best-matching stretch.
    pub score: f32,
    /// Its score against the averaged recording.
    pub avg_score: f32,
    /// Where the phrase starts, in samples since the detector was made (estimated from
    /// the length of the recording it matched best).
    pub start: u64,
    /// Where the phrase ends: what follows is the command.
    pub end: u64,
    /// Where the detector decided (a little after `end`: it waits to be sure no better
    /// match follows).
    pub fired_at: u64,
    /// Frames that scored over the threshold (for a neural word over the echo canceller's
    /// output, with the short dips its run went on through: [`Detector::set_over_echo`]).
    pub frames: usize,
    /// How far the phrase was above this device's noise floor, in dB (0 until the
    /// listener, which hears the room, measures it).
    pub proximity_db: f32,
}

impl Detection {
    /// `start` in seconds.
    pub fn start_secs(&self) -> f64 {
        self.start as f64 / f64::from(SAMPLE_RATE)
    }
    /// `end` in seconds.
    pub fn end_secs(&self) -> f64 {
        self.end as f64 / f64::from(SAMPLE_RATE)
    }
    /// `fired_at` in seconds.
    pub fn fired_secs(&self) -> f64 {
        self.fired_at as f64 / f64::from(SAMPLE_RATE)
    }
}

/// The best partial match so far, with where its stretch of audio lies.
#[derive(Debug, Clone, Copy)]
struct Partial {
    score: f32,
    start: u64,
    end: u64,
}

/// Listens for one or more wake words in a 16 kHz mono stream.
pub struct Detector {
    settings: Settings,
    /// The reference words.
    engine: Engine,
    /// The neural words.
    runners: Vec<neural::Runner>,
    /// Names of the words listened for.
    words: Vec<String>,
    /// Samples not yet making a whole frame.
    pending: Vec<f32>,
    /// Stream position of `pending[0]`.
    pending_at: u64,
    /// The current candidate, while the engine waits to see if a better one follows.
    partial: Option<Partial>,
    /// The best reference-word candidate ever seen (for `wakeword test`'s "closest
    /// miss").
    peak: Option<(f32, u64)>,
}

impl std::fmt::Debug for Detector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detector")
            .field("words", &self.words)
            .field("position", &self.position())
            .finish_non_exhaustive()
    }
}

impl Detector {
    /// A detector with no words yet.
    pub fn new(settings: &Settings) -> Result<Detector, WakeError> {
        settings.check()?;
        let reference_threshold = settings
            .threshold
            .unwrap_or_else(|| settings.sensitivity.reference_threshold());
        Ok(Detector {
            settings: settings.clone(),
            engine: Engine::new(settings, reference_threshold),
            runners: Vec::new(),
            words: Vec::new(),
            pending: Vec::with_capacity(FRAME_SAMPLES),
            pending_at: 0,
            partial: None,
            peak: None,
        })
    }

    /// A detector listening for one word.
    pub fn with_word(settings: &Settings, word: &WakeWord) -> Result<Detector, WakeError> {
        let mut detector = Detector::new(settings)?;
        detector.add_word(word)?;
        Ok(detector)
    }

    /// Adds a word (replacing one of the same name). Reference words must share a
    /// feature size.
    pub fn add_word(&mut self, word: &WakeWord) -> Result<(), WakeError> {
        let name = word.name().to_string();
        self.remove_word(&name);
        match &word.kind {
            Kind::Reference(r) => {
                self.engine
                    .add_word(r)
                    .map_err(|message| WakeError::Detector {
                        name: name.clone(),
                        message,
                    })?
            }
            Kind::Neural(m) => {
                let listen = match self.settings.threshold {
                    Some(t) => neural::Listen::Threshold(t),
                    None => neural::Listen::At(self.settings.sensitivity),
                };
                self.runners
                    .push(neural::Runner::new(m.clone(), listen, self.pending_at))
            }
        }
        self.words.push(name);
        self.partial = None;
        Ok(())
    }

    /// Stops listening for a word; false when there was none of that name.
    pub fn remove_word(&mut self, name: &str) -> bool {
        self.words.retain(|w| w != name);
        self.partial = None;
        let runners = self.runners.len();
        self.runners.retain(|r| r.name() != name);
        self.engine.remove_word(name) || runners != self.runners.len()
    }

    /// The threshold each word listens with (`sensitivity` resolved per word).
    pub fn thresholds(&self) -> Vec<(String, f32)> {
        let reference = self
            .settings
            .threshold
            .unwrap_or_else(|| self.settings.sensitivity.reference_threshold());
        self.words
            .iter()
            .map(|w| {
                let t = self.runners.iter().find(|r| r.name() == w);
                (w.clone(), t.map_or(reference, |r| r.threshold()))
            })
            .collect()
    }

    /// Forgets the audio heard so far (half-matched phrases included), e.g. after the
    /// spoke spoke itself. Positions keep counting.
    pub fn reset(&mut self) {
        self.engine.reset();
        self.pending_at += self.pending.len() as u64;
        self.pending.clear();
        self.partial = None;
        for r in &mut self.runners {
            r.reset(self.pending_at);
        }
    }

    /// Whether the audio that follows comes out of an echo canceller taking the spoke's
    /// own sound out ([`crate::audio::echo::Canceller::over_echo`]). Its residual echo
    /// suppressor marks a phrase said over a reply: just after "hey strawberry" a neural
    /// word's score dipped under the threshold for a frame or two in about one phrase in
    /// eight (`tests/voice_echo.rs`: 8 misses in 60 trials, every dip logged 1-2 frames
    /// long), which ended the run of frames the word needs, so the reply went on. While
    /// this is set, a run goes on through short dips ([`neural::ECHO_GAP`]); the spoke's
    /// own "hey strawberry" in a reply comes out of the suppressor scoring under 0.3, far
    /// from any threshold. Why not always: over the dev split's two hours of ordinary
    /// speech, music and noise the bundled word with it fires 3 times at `medium`, where
    /// consecutive frames fire none, and the spoke talks a small share of the day.
    pub fn set_over_echo(&mut self, over_echo: bool) {
        for r in &mut self.runners {
            r.set_max_gap(if over_echo { neural::ECHO_GAP } else { 0 });
        }
    }

    /// Samples given to [`Detector::process`] so far.
    pub fn position(&self) -> u64 {
        self.pending_at + self.pending.len() as u64
    }

    /// The highest score a candidate reached so far and where its stretch ended
    /// (reference-word scores under the threshold never become candidates; a neural
    /// word scores every 10 ms).
    pub fn peak(&self) -> Option<(f32, u64)> {
        self.runners
            .iter()
            .filter_map(neural::Runner::peak)
            .chain(self.peak)
            .max_by(|a, b| a.0.total_cmp(&b.0))
    }

    /// Feeds audio (16 kHz mono, any chunk length) and returns what was detected in it.
    pub fn process(&mut self, samples: &[f32]) -> Vec<Detection> {
        let mut found = Vec::new();
        let mut rest = samples;
        while !rest.is_empty() {
            let take = (FRAME_SAMPLES - self.pending.len()).min(rest.len());
            // A broken driver's NaN would poison the features for the whole window.
            self.pending.extend(rest[..take].iter().map(|&s| {
                if s.is_finite() {
                    s.clamp(-1.0, 1.0)
                } else {
                    0.0
                }
            }));
            rest = &rest[take..];
            if self.pending.len() == FRAME_SAMPLES {
                self.pending_at += FRAME_SAMPLES as u64;
                // Neural words first: the reference engine may scale the frame in place.
                for r in &mut self.runners {
                    found.extend(r.process(&self.pending));
                }
                if let Some(d) = self.process_frame() {
                    found.push(d);
                }
                self.pending.clear();
            }
        }
        found
    }

    /// Scores the whole frame in `pending`, which ends at `pending_at`, against the
    /// reference words.
    fn process_frame(&mut self) -> Option<Detection> {
        let now = self.pending_at;
        if let Some(d) = self.engine.process_frame(&mut self.pending) {
            let partial = self.partial.take();
            let (start, end) =
                partial.map_or_else(|| self.placement(d.best_frames, now), |p| (p.start, p.end));
            return Some(Detection {
                name: d.name,
                score: d.score,
                avg_score: d.avg_score,
                start,
                end,
                fired_at: now,
                frames: d.counter,
                proximity_db: 0.0,
            });
        }
        match self.engine.partial() {
            None => self.partial = None,
            Some(p) => {
                if self.partial.is_none_or(|old| p.score > old.score) {
                    let (start, end) = self.placement(p.best_frames, now);
                    self.partial = Some(Partial {
                        score: p.score,
                        start,
                        end,
                    });
                    if self.peak.is_none_or(|(s, _)| p.score > s) {
                        self.peak = Some((p.score, end));
                    }
                }
            }
        }
        None
    }

    /// Where the stretch matched by the best recording (`best` feature frames long)
    /// lies, when the window ends at `now`. Each recording is compared with the *first*
    /// frames of the window (as many as the recording has), so a shorter recording's
    /// match ends before `now`.
    fn placement(&self, best: usize, now: u64) -> (u64, u64) {
        let window = self.engine.window_frames() as u64 * SHIFT_SAMPLES;
        let start = now.saturating_sub(window);
        let end = (start + best as u64 * SHIFT_SAMPLES).min(now);
        (start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_reference_word_loads() {
        let word = WakeWord::bundled_reference().unwrap();
        assert_eq!(word.name(), BUNDLED_NAME);
        assert!(word.recordings() >= 6, "{word:?}");
        // ~1 s phrases: the detector's window.
        let longest = word.longest_samples() as f64 / f64::from(SAMPLE_RATE);
        assert!((0.6..2.0).contains(&longest), "{longest}");
    }

    #[test]
    fn chunks_of_any_length_are_buffered_and_counted() {
        let mut detector = Detector::with_word(
            &Settings::default(),
            &WakeWord::bundled_reference().unwrap(),
        )
        .unwrap();
        let quiet = vec![0.001f32; 1_000];
        for len in [1, 479, 480, 481, 7, 999] {
            assert!(detector.process(&quiet[..len]).is_empty());
        }
        assert_eq!(detector.position(), 1 + 479 + 480 + 481 + 7 + 999);
        // Broken samples are not an error, and reset keeps the count.
        assert!(detector.process(&[f32::NAN, f32::INFINITY, 3.0]).is_empty());
        detector.reset();
        assert_eq!(detector.position(), 2_450);
        assert!(detector.peak().is_none());
    }

    #[test]
    fn settings_are_checked() {
        assert!(Settings::default().check().is_ok());
        for (bad, key) in [
            (
                Settings {
                    threshold: Some(f32::NAN),
                    ..Settings::default()
                },
                "threshold",
            ),
            (
                Settings {
                    avg_threshold: -0.1,
                    ..Settings::default()
                },
                "avg_threshold",
            ),
            (
                Settings {
                    score_ref: 0.0,
                    ..Settings::default()
                },
                "score_ref",
            ),
            (
                Settings {
                    min_scores: 0,
                    ..Settings::default()
                },
                "min_scores",
            ),
            (
                Settings {
                    band_size: 0,
                    ..Settings::default()
                },
                "band_size",
            ),
        ] {
            let err = Detector::new(&bad).unwrap_err();
            assert!(
                matches!(err, WakeError::Setting { key: k, .. } if k == key),
                "{err}"
            );
        }
    }
}
