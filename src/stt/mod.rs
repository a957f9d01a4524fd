//! Speech to text on the device: whisper.cpp (through whisper-rs) with a ggml model.
//!
//! Why on the device: the transcript is the only thing that leaves the spoke, and a
//! command is short, so a small Whisper model on a Pi answers faster than a round trip
//! with audio would. What makes it fast is fitting the encoder's audio context to the
//! utterance: Whisper always encodes a 30 s window (1500 frames of 20 ms) by default,
//! which for a two-second command is mostly silence; encoding only the frames the
//! command needs (plus a margin) cut tiny.en from ~0.52 s to ~0.14 s per command.
//!
//! Input is 16 kHz mono f32 ([`audio`] turns any WAV into that). Models are ggml files;
//! [`ct2`] makes one from a faster-whisper (CTranslate2) model.
//!
//! Language: with `auto` and a multilingual model the language is detected per
//! utterance. whisper.cpp's own detection encodes the full 30 s window once more before
//! transcribing (it runs before the fitted audio context applies), which tripled the
//! time of a short command. Here the utterance is transcribed in the language heard
//! last, and the language is then read from the encoder output that transcription
//! left behind: one decoder step on the start-of-transcript token, its language logits
//! compared among the household's languages only. Only when that differs is the
//! command transcribed again, so a household that speaks one language at a time pays
//! for detection with one decoder step.

pub mod audio;
pub mod ct2;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use whisper_rs::{
    FullParams, SamplingStrategy, WhisperContext, WhisperContextParameters, WhisperState,
};

/// The sample rate Whisper works at.
pub const SAMPLE_RATE: u32 = crate::audio::SAMPLE_RATE;

/// whisper.cpp refuses input shorter than one second; shorter commands are padded
/// with silence to this many samples.
const MIN_SAMPLES: usize = SAMPLE_RATE as usize * 11 / 10;

/// One encoder frame is 20 ms of audio: 50 frames per second.
const FRAMES_PER_SECOND: usize = 50;

/// The audio context is rounded up to this many frames, so a handful of sizes cover
/// every command (whisper.cpp re-plans its compute graph when the size changes).
const CTX_STEP: usize = 128;

/// Frames of margin beyond the audio, so the last word is never cut.
const CTX_MARGIN: usize = 64;

/// The smallest audio context used: below this tiny models start to hallucinate.
const CTX_MIN: usize = 384;

/// What the transcriber needs: which model, how many threads, which language.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// A ggml Whisper model (`ggml-tiny.en-q8_0.bin`, or one made by `model import-ct2`).
    pub model: PathBuf,
    /// CPU threads for inference.
    pub threads: usize,
    /// Spoken language (`en`, `de`...), or `auto` to detect it (multilingual models).
    pub language: String,
    /// With `auto`: the languages detection chooses among (empty: all Whisper knows).
    /// Among two to four, detection is far more reliable than among 99.
    pub languages: Vec<String>,
}

/// Why speech to text failed. Each names the model file or the problem and the fix.
#[derive(Debug, thiserror::Error)]
pub enum SttError {
    /// The model file could not be read.
    #[error(
        "cannot read the speech-to-text model {path}: {source} (set stt.model; `strawberry-spoke model import-ct2` converts a faster-whisper model)"
    )]
    ModelRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The model file is not one whisper.cpp can load.
    #[error("{path}: {message}")]
    ModelFormat { path: PathBuf, message: String },
    /// whisper.cpp refused the model.
    #[error(
        "whisper.cpp could not load {path}: {message} (is it a complete ggml Whisper model? the log above says more)"
    )]
    ModelLoad { path: PathBuf, message: String },
    /// A language code Whisper does not know.
    #[error(
        "{setting}: {code:?} is not a language Whisper knows; use a code such as \"en\", \"de\", \"fr\" or \"es\""
    )]
    UnknownLanguage { setting: &'static str, code: String },
    /// A language other than English asked of an English-only model.
    #[error(
        "{path} understands English only, and stt.language is {code:?}: use a multilingual model (see the README's speech-to-text section) or stt.language = \"en\""
    )]
    EnglishOnly { path: PathBuf, code: String },
    /// Inference failed.
    #[error("speech to text failed: {0}")]
    Inference(String),
}

/// One transcription.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    /// The text, trimmed.
    pub text: String,
    /// Length of the audio.
    pub audio: Duration,
    /// Time spent in whisper.cpp.
    pub inference: Duration,
    /// The encoder's audio context used, in frames (1500 = the full 30 s window).
    pub audio_ctx: usize,
    /// How sure the decoder was of the last word (its least likely token, 0-1; 1 with
    /// no words). Whisper tends to finish a sentence cut off mid-way with a word of its
    /// own ("set a timer for it."), and such words are often unsure ones.
    pub last_word_probability: f32,
    /// The language spoken (`en`, `de`...): the configured one, or the one detected.
    pub language: &'static str,
}

/// Which language an utterance is transcribed in.
#[derive(Debug, Clone, PartialEq)]
enum Language {
    /// Always this one (Whisper's language id).
    Fixed(i32),
    /// Detected per utterance among these ids (never empty).
    Detect(Vec<i32>),
}

/// A loaded model, ready to transcribe. Transcriptions run one at a time (two at once
/// would only split the same cores), each with a fresh whisper.cpp state.
pub struct Transcriber {
    context: WhisperContext,
    /// Held while transcribing; holds the language heard last, the first guess for
    /// the next utterance.
    busy: Mutex<i32>,
    settings: Settings,
    language: Language,
    model_ctx: usize,
    load_time: Duration,
}

impl std::fmt::Debug for Transcriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transcriber")
            .field("settings", &self.settings)
            .field("language", &self.language)
            .field("model_ctx", &self.model_ctx)
            .field("load_time", &self.load_time)
            .finish_non_exhaustive()
    }
}

impl Transcriber {
    /// Loads the model named in `settings`.
    pub fn load(settings: &Settings) -> Result<Transcriber, SttError> {
        let started = Instant::now();
        check_model_file(&settings.model)?;
        // whisper.cpp's own log goes through `tracing` (target `whisper_rs`).
        whisper_rs::install_logging_hooks();
        let path = &settings.model;
        let load_err = |e: whisper_rs::WhisperError| SttError::ModelLoad {
            path: path.clone(),
            message: e.to_string(),
        };
        let context = WhisperContext::new_with_params(path, WhisperContextParameters::default())
            .map_err(load_err)?;
        // Made once here only to fail early on a model whisper.cpp cannot run.
        drop(context.create_state().map_err(load_err)?);
        let model_ctx = usize::try_from(context.model_n_audio_ctx()).unwrap_or(1500);
        let language = language_of(settings, context.is_multilingual())?;
        let first = match &language {
            Language::Fixed(id) => *id,
            Language::Detect(ids) => ids[0],
        };
        let load_time = started.elapsed();
        tracing::info!(
            model = %path.display(),
            ms = load_time.as_millis() as u64,
            threads = settings.threads,
            language = ?language,
            "speech-to-text model loaded"
        );
        Ok(Transcriber {
            context,
            busy: Mutex::new(first),
            settings: settings.clone(),
            language,
            model_ctx,
            load_time,
        })
    }

    /// How long [`Transcriber::load`] took.
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// Whether the model understands more than English.
    pub fn is_multilingual(&self) -> bool {
        self.context.is_multilingual()
    }

    /// Transcribes 16 kHz mono samples in `[-1, 1]`.
    pub fn transcribe(&self, samples: &[f32]) -> Result<Transcript, SttError> {
        let started = Instant::now();
        let audio = Duration::from_secs_f64(samples.len() as f64 / f64::from(SAMPLE_RATE));
        let mut padded;
        let input = if samples.len() < MIN_SAMPLES {
            padded = samples.to_vec();
            padded.resize(MIN_SAMPLES, 0.0);
            &padded[..]
        } else {
            samples
        };
        let audio_ctx = fitted_audio_ctx(input.len(), self.model_ctx);
        let mut last_heard = self
            .busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A state per utterance: whisper.cpp grows its compute buffers on first use
        // and never shrinks them, so a kept state holds ~25 MB while the spoke idles;
        // making one costs a few milliseconds.
        let made = Instant::now();
        let mut state = self.context.create_state().map_err(inference)?;
        let state_us = made.elapsed().as_micros() as u64;
        let mut language = *last_heard;
        self.decode(&mut state, input, audio_ctx, language)?;
        let mut passes = 1;
        if let Language::Detect(candidates) = &self.language {
            let heard = self.detect(&mut state, candidates)?;
            if heard != language {
                language = heard;
                self.decode(&mut state, input, audio_ctx, language)?;
                passes = 2;
            }
            *last_heard = language;
        }
        drop(last_heard);
        let (text, last_word_probability) = read_text(&state)?;
        let inference = started.elapsed();
        let language = whisper_rs::get_lang_str(language).unwrap_or("en");
        tracing::debug!(
            audio_ms = audio.as_millis() as u64,
            audio_ctx,
            ms = inference.as_millis() as u64,
            state_us,
            language,
            passes,
            %text,
            "transcribed"
        );
        Ok(Transcript {
            text,
            audio,
            inference,
            audio_ctx: audio_ctx.min(self.model_ctx),
            last_word_probability,
            language,
        })
    }

    /// One whisper.cpp pass over `input` in the language with id `language`.
    fn decode(
        &self,
        state: &mut WhisperState,
        input: &[f32],
        audio_ctx: usize,
        language: i32,
    ) -> Result<(), SttError> {
        let mut params = FullParams::new(SamplingStrategy::Greedy { best_of: 1 });
        params.set_n_threads(i32::try_from(self.settings.threads).unwrap_or(1));
        params.set_language(whisper_rs::get_lang_str(language));
        // Fit the encoder to the utterance; 0 means the model's full window.
        params.set_audio_ctx(if audio_ctx >= self.model_ctx {
            0
        } else {
            audio_ctx as i32
        });
        params.set_no_context(true);
        params.set_no_timestamps(true);
        params.set_single_segment(true);
        params.set_suppress_nst(true);
        params.set_print_special(false);
        params.set_print_progress(false);
        params.set_print_realtime(false);
        params.set_print_timestamps(false);
        state.full(params, input).map_err(inference)?;
        Ok(())
    }

    /// The language among `candidates` that the encoder output in `state` sounds most
    /// like: what whisper.cpp's own detection computes (the decoder's logits for the
    /// language tokens after start-of-transcript), on the encoding already made.
    fn detect(&self, state: &mut WhisperState, candidates: &[i32]) -> Result<i32, SttError> {
        if let [only] = candidates {
            return Ok(*only);
        }
        let threads = self.settings.threads.max(1);
        state
            .decode(&[self.context.token_sot()], 0, threads)
            .map_err(inference)?;
        let logits = state.get_logits().map_err(inference)?;
        let logit = |id: i32| {
            usize::try_from(self.context.token_lang(id))
                .ok()
                .and_then(|token| logits.get(token).copied())
                .unwrap_or(f32::NEG_INFINITY)
        };
        Ok(candidates
            .iter()
            .copied()
            .max_by(|a, b| logit(*a).total_cmp(&logit(*b)))
            .unwrap_or(candidates[0]))
    }
}

fn inference(error: whisper_rs::WhisperError) -> SttError {
    SttError::Inference(error.to_string())
}

/// The text of a finished pass and how sure the decoder was of its last word.
fn read_text(state: &WhisperState) -> Result<(String, f32), SttError> {
    let mut text = String::new();
    let mut last_word_probability = 1.0f32;
    for segment in state.as_iter() {
        let piece = segment.to_str_lossy().map_err(inference)?;
        text.push_str(&piece);
        for token in (0..segment.n_tokens()).filter_map(|i| segment.get_token(i)) {
            let Ok(piece) = token.to_str_lossy() else {
                continue;
            };
            // Special tokens ("[_EOT_]") and punctuation are not words.
            if piece.starts_with("[_") || !piece.chars().any(char::is_alphanumeric) {
                continue;
            }
            let p = token.token_probability();
            last_word_probability = if piece.starts_with(' ') {
                p
            } else {
                last_word_probability.min(p)
            };
        }
    }
    Ok((text.trim().to_string(), last_word_probability))
}

/// How `settings` choose the language, checked against what the model knows.
fn language_of(settings: &Settings, multilingual: bool) -> Result<Language, SttError> {
    let id = |setting: &'static str, code: &str| {
        whisper_rs::get_lang_id(code).ok_or_else(|| SttError::UnknownLanguage {
            setting,
            code: code.to_string(),
        })
    };
    let english = id("stt.language", "en")?;
    if settings.language != "auto" {
        let fixed = id("stt.language", &settings.language)?;
        if !multilingual && fixed != english {
            return Err(SttError::EnglishOnly {
                path: settings.model.clone(),
                code: settings.language.clone(),
            });
        }
        return Ok(Language::Fixed(fixed));
    }
    // An English-only model has nothing to detect.
    if !multilingual {
        return Ok(Language::Fixed(english));
    }
    let mut ids = Vec::new();
    for code in &settings.languages {
        let lang = id("stt.languages", code)?;
        if !ids.contains(&lang) {
            ids.push(lang);
        }
    }
    if ids.is_empty() {
        ids = (0..=whisper_rs::get_lang_max_id()).collect();
        // English first: the guess for the first utterance.
        ids.retain(|&i| i != english);
        ids.insert(0, english);
    }
    Ok(Language::Detect(ids))
}

/// The English name of a language code Whisper knows: `de` -> `German`.
pub fn language_name(code: &str) -> Option<String> {
    let id = whisper_rs::get_lang_id(code)?;
    let name = whisper_rs::get_lang_str_full(id)?;
    let mut chars = name.chars();
    let first = chars.next()?;
    Some(first.to_uppercase().chain(chars).collect())
}

/// The encoder frames an utterance of `samples` needs: its length plus a margin,
/// rounded up to a step, at least [`CTX_MIN`], at most the model's window.
pub fn fitted_audio_ctx(samples: usize, model_ctx: usize) -> usize {
    let frames = samples.div_ceil(SAMPLE_RATE as usize / FRAMES_PER_SECOND);
    let ctx = (frames + CTX_MARGIN).div_ceil(CTX_STEP) * CTX_STEP;
    ctx.max(CTX_MIN).min(model_ctx)
}

/// Refuses files whisper.cpp would fail on obscurely or abort on (f32 models).
fn check_model_file(path: &Path) -> Result<(), SttError> {
    let read_err = |source| SttError::ModelRead {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(read_err)?;
    let mut header = [0u8; 48];
    let n = file.read(&mut header).map_err(read_err)?;
    let format_err = |message: &str| SttError::ModelFormat {
        path: path.to_path_buf(),
        message: message.to_string(),
    };
    if n < header.len() || header[..4] != 0x6767_6d6cu32.to_le_bytes() {
        return Err(format_err(
            "not a ggml Whisper model (convert a faster-whisper model with `strawberry-spoke model import-ct2 DIR OUT`)",
        ));
    }
    let ftype = i32::from_le_bytes([header[44], header[45], header[46], header[47]]) % 1000;
    if ftype == 0 {
        return Err(format_err(
            "an all-f32 model: whisper.cpp aborts on these; convert it to f16 or q8_0 (`model import-ct2 --quantize q8_0`, or whisper.cpp's quantize)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audio_ctx_fits_the_utterance() {
        let second = SAMPLE_RATE as usize;
        assert_eq!(fitted_audio_ctx(second, 1500), CTX_MIN);
        // 6 s = 300 frames + margin -> 384; 8 s = 400 + 64 -> 512.
        assert_eq!(fitted_audio_ctx(6 * second, 1500), 384);
        assert_eq!(fitted_audio_ctx(8 * second, 1500), 512);
        assert_eq!(fitted_audio_ctx(29 * second, 1500), 1500);
        assert_eq!(fitted_audio_ctx(60 * second, 1500), 1500);
    }

    #[test]
    fn missing_and_foreign_model_files_are_clear_errors() {
        let missing = check_model_file(Path::new("/nonexistent/model.bin")).unwrap_err();
        assert!(matches!(missing, SttError::ModelRead { .. }), "{missing}");
        assert!(missing.to_string().contains("stt.model"), "{missing}");

        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "just some text, long enough to have a whole header").unwrap();
        let err = check_model_file(&text).unwrap_err();
        assert!(
            err.to_string().contains("not a ggml Whisper model"),
            "{err}"
        );

        let mut f32_model = 0x6767_6d6cu32.to_le_bytes().to_vec();
        f32_model.extend_from_slice(&[0u8; 44]);
        let path = dir.path().join("f32.bin");
        std::fs::write(&path, f32_model).unwrap();
        let err = check_model_file(&path).unwrap_err();
        assert!(err.to_string().contains("f32"), "{err}");
    }
}
