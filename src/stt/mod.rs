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
//!
//! # No invented words, no silent minute
//!
//! Whisper can loop ("Remind me to take the bin's outer taste! Remind me to take the
//! bin's outer taste! ...") or invent a sentence, and a loop runs until the decoder's
//! window is full: minutes on a busy board, and then a command nobody gave. Each decode
//! is checked as faster-whisper and openai-whisper check theirs: the compression ratio
//! of its text (zlib, as they compute it; over 2.4 is a loop), its average token
//! log-probability (under -1.0 is a guess), and whisper's no-speech probability (over
//! 0.6 with a low log-probability is silence, not words). A decode that fails is done
//! again at a higher temperature (0.2, 0.4, 0.6, five samples each, the likeliest
//! kept). Two checks are added for commands: a token budget that follows the audio's
//! length ([`token_budget`]; a decode that reaches it is cut and counts as a loop), and
//! a phrase of four or more words said twice in a row counts as a loop, because on a
//! command of a few words zlib's overhead keeps a doubled phrase under 2.4. A decode
//! whose tokens come to end with a run said twice is stopped right there (a logits
//! filter lets only the end of text follow): looping, it would only fill its budget.
//!
//! Decoding with timestamps (faster-whisper's default, and the daemon's since it ended
//! most fallbacks: [`DEFAULT_TIMESTAMPS`]) is guarded alike: whisper.cpp may end such a
//! decode on a timestamp at the end of the audio instead of the end of text, which is a
//! whole decode (only one that reaches its budget is cut), and the repeat checks compare
//! text tokens only, since the timestamps differ each time a phrase comes round again.
//!
//! whisper.cpp has its own fallback, used by default until now: it runs six
//! temperatures, each decode up to 220 tokens, and keeps the last one however bad; its
//! repetition check (token entropy) looks only at decodes over 32 tokens, so a command
//! said three times over passes it. It is switched off here (one temperature per call)
//! and the loop above runs instead, with whisper.cpp's own no-speech rule (same
//! thresholds) deciding silence.
//!
//! The time is bounded: at most four decodes, each within its token budget, and a
//! wall-clock limit per command (`stt.timeout_ms`) that aborts a decode through
//! whisper.cpp's abort callback. This whisper.cpp checks that callback after each
//! decoded token and after each encoder pass, not inside one, so the limit can be
//! overrun by one encoder pass (a fallback that would not end in time is not begun). When no decode passes, the likeliest one that does not
//! loop is used ([`Verdict::Unsure`]), else a loop that is one phrase over and over from
//! its first word gives that phrase once (whisper missed the end of the command, and
//! repeated it); when nothing is left or the time runs out first, the text is empty and
//! the verdict says why, so the daemon says it did not catch that.

pub mod audio;
pub mod ct2;

use std::ffi::c_void;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::deadline::Cancel;

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

/// A decode's text compressing better than this is a loop (openai-whisper's and
/// faster-whisper's `compression_ratio_threshold`).
const COMPRESSION_RATIO_MAX: f64 = 2.4;

/// A decode whose tokens average a lower log-probability is a guess (their
/// `log_prob_threshold`; also whisper.cpp's `logprob_thold`).
const LOGPROB_MIN: f32 = -1.0;

/// With a low log-probability, a no-speech probability above this means silence
/// (their `no_speech_threshold`; whisper.cpp's `no_speech_thold`).
const NO_SPEECH_MIN: f32 = 0.6;

/// The temperatures tried in turn, the first decode greedy: faster-whisper's ladder
/// cut after 0.6, since hotter samples are mostly noise and each try costs an encoding.
const TEMPERATURES: [f32; 4] = [0.0, 0.2, 0.4, 0.6];

/// Samples drawn at a temperature above zero, the likeliest kept (their `best_of`).
const SAMPLES: i32 = 5;

/// Tokens allowed per second of audio, and on top of it: English speech runs at
/// 3-5 tokens a second, languages with longer tokenisations at up to about twice that.
const TOKENS_PER_SECOND: f64 = 10.0;
const TOKEN_MARGIN: usize = 10;

/// whisper.cpp's own cap on a decode (half the text context, less the prompt).
const TOKENS_MAX: usize = 220;

/// A run of this many words or more said twice in a row is a loop.
const REPEAT_WORDS: usize = 4;

/// A decode whose tokens end with a run of this many or more twice over is stopped
/// there: it has started to loop, and the rest would only cost time.
const REPEAT_TOKENS: usize = 4;

/// [`Settings::beam_size`] unless configured (`stt.beam_size`): greedy. On held-out
/// voices a beam of 5 (faster-whisper's default) erred as often with base for 1.5x the
/// time, and saved half a point of WER with tiny.en for 1.9x (BENCHMARKS.md).
pub const DEFAULT_BEAM_SIZE: usize = 1;

/// The widest beam allowed: whisper.cpp runs one decoder per beam, each with its own
/// share of the key-value cache.
pub const MAX_BEAM_SIZE: usize = 8;

/// [`Settings::timestamps`] in the daemon: with, as faster-whisper decodes. On held-out
/// voices the model then closes a command with a timestamp instead of saying it again:
/// base's first greedy decode passed the checks on 96 of 96 commands (82 without), for
/// the same word errors and about half the total time (BENCHMARKS.md).
pub const DEFAULT_TIMESTAMPS: bool = true;

/// [`Settings::timeout`] unless configured (`stt.timeout_ms`): several times what a
/// command of a few seconds takes with base on a Pi 4 class board.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// The longest one transcription may take, all decodes together.
    pub timeout: Duration,
    /// Beams of the first, temperature-0 decode ([`DEFAULT_BEAM_SIZE`]); 1 decodes
    /// greedily.
    pub beam_size: usize,
    /// Decode with timestamp tokens, as faster-whisper does by default
    /// ([`DEFAULT_TIMESTAMPS`]); the text is the same words without them.
    pub timestamps: bool,
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
        "{path} understands English only, and stt.language is {code:?}: use a multilingual model (`strawberry-spoke model fetch base`; docs/voice-loop.md, \"Speech to text: which model\") or stt.language = \"en\""
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
    /// What the checks made of it.
    pub verdict: Verdict,
    /// whisper.cpp decodes run (fallbacks and a second language included).
    pub decodes: usize,
}

/// What the checks on each decode made of a transcription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A decode passed every check.
    Clear,
    /// Whisper heard no words (the text is empty).
    Silence,
    /// No decode passed; the text is the likeliest one that did not loop.
    Unsure,
    /// Every decode looped or ran out of tokens: the text is empty.
    Garbled,
    /// The time limit ended it: the text is the best decode before that, or empty.
    TimedOut,
}

impl Verdict {
    /// How the verdict reads in logs and `transcribe`'s timings.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Clear => "clear",
            Verdict::Silence => "silence",
            Verdict::Unsure => "unsure",
            Verdict::Garbled => "garbled",
            Verdict::TimedOut => "timed out",
        }
    }
}

/// One decode and how it fared.
#[derive(Debug)]
struct Decode {
    text: String,
    last_word_probability: f32,
    avg_logprob: f32,
    compression_ratio: f64,
    /// It reached its token budget instead of ending.
    cut: bool,
    /// Tokens decoded, timestamps and the end of text included.
    tokens: usize,
    /// A phrase of [`REPEAT_WORDS`] or more words said twice in a row, or tokens that
    /// end with a run twice over (where [`stop_loops`] ends a decode).
    repeats: bool,
}

impl Decode {
    fn loops(&self) -> bool {
        self.cut || self.repeats || self.compression_ratio > COMPRESSION_RATIO_MAX
    }

    fn passes(&self) -> bool {
        !self.loops() && self.avg_logprob >= LOGPROB_MIN
    }
}

/// The outcome of the decodes of one utterance in one language.
struct Guarded {
    text: String,
    last_word_probability: f32,
    verdict: Verdict,
    decodes: usize,
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

    /// Transcribes 16 kHz mono samples in `[-1, 1]`, within [`Settings::timeout`].
    pub fn transcribe(&self, samples: &[f32]) -> Result<Transcript, SttError> {
        self.transcribe_cancellable(samples, &Cancel::new())
    }

    /// [`Transcriber::transcribe`] that also stops, between two tokens, once `cancel`
    /// is cancelled (the turn it was for was stopped, the daemon is stopping); what was
    /// decoded so far is returned as if the time had run out.
    pub fn transcribe_cancellable(
        &self,
        samples: &[f32],
        cancel: &Cancel,
    ) -> Result<Transcript, SttError> {
        let started = Instant::now();
        let until = Until {
            at: started + self.settings.timeout,
            cancel: cancel.clone(),
        };
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
        let budget = token_budget(samples.len());
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
        let job = Job {
            input,
            audio_ctx,
            budget,
            until,
            stop: LoopStop {
                eot: self.context.token_eot(),
                vocab: usize::try_from(self.context.n_vocab()).unwrap_or(0),
            },
        };
        let mut heard = self.guarded(&mut state, &job, language)?;
        let mut decodes = heard.decodes;
        // Detection reads the encoding the decodes left; a timed-out one may have none.
        if let Language::Detect(candidates) = &self.language
            && heard.verdict != Verdict::TimedOut
        {
            let detected = self.detect(&mut state, candidates)?;
            if detected != language {
                let again = self.guarded(&mut state, &job, detected)?;
                decodes += again.decodes;
                if again.verdict == Verdict::TimedOut && again.text.is_empty() {
                    // Out of time in the other language: the first one's words are
                    // the best so far.
                    heard.verdict = Verdict::TimedOut;
                } else {
                    language = detected;
                    heard = again;
                }
            }
            *last_heard = language;
        }
        drop(last_heard);
        let inference = started.elapsed();
        let language = whisper_rs::get_lang_str(language).unwrap_or("en");
        let Guarded {
            text,
            last_word_probability,
            verdict,
            ..
        } = heard;
        if matches!(verdict, Verdict::Garbled | Verdict::TimedOut) {
            tracing::warn!(
                audio_ms = audio.as_millis() as u64,
                ms = inference.as_millis() as u64,
                decodes,
                verdict = verdict.as_str(),
                %text,
                "speech to text: no decode passed the checks in time (stt.timeout_ms bounds it)"
            );
        }
        tracing::debug!(
            audio_ms = audio.as_millis() as u64,
            audio_ctx,
            ms = inference.as_millis() as u64,
            state_us,
            language,
            decodes,
            verdict = verdict.as_str(),
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
            verdict,
            decodes,
        })
    }

    /// Decodes `job` in `language` at rising temperatures until a decode passes the
    /// checks, the temperatures run out or the time does.
    fn guarded(
        &self,
        state: &mut WhisperState,
        job: &Job,
        language: i32,
    ) -> Result<Guarded, SttError> {
        let mut tried: Vec<Decode> = Vec::new();
        let mut last = Duration::ZERO;
        for temperature in TEMPERATURES {
            // A decode that would not end in time is not begun: whisper.cpp checks the
            // abort callback only between tokens and after an encoder pass.
            if job.until.over_after(last) {
                return Ok(best_of(tried, Verdict::TimedOut));
            }
            let started = Instant::now();
            let decode = self.decode(state, job, language, temperature);
            last = started.elapsed();
            let decode = match decode {
                Ok(decode) => decode,
                Err(_) if job.until.over_after(Duration::ZERO) => {
                    return Ok(best_of(tried, Verdict::TimedOut));
                }
                Err(error) => return Err(error),
            };
            tracing::debug!(
                temperature,
                avg_logprob = decode.as_ref().map(|d| d.avg_logprob),
                compression_ratio = decode.as_ref().map(|d| d.compression_ratio),
                cut = decode.as_ref().map(|d| d.cut),
                tokens = decode.as_ref().map(|d| d.tokens),
                repeats = decode.as_ref().map(|d| d.repeats),
                text = decode.as_ref().map(|d| d.text.as_str()),
                "decoded"
            );
            let Some(decode) = decode else {
                return Ok(Guarded {
                    text: String::new(),
                    last_word_probability: 1.0,
                    verdict: Verdict::Silence,
                    decodes: tried.len() + 1,
                });
            };
            if decode.passes() {
                return Ok(Guarded {
                    text: decode.text,
                    last_word_probability: decode.last_word_probability,
                    verdict: Verdict::Clear,
                    decodes: tried.len() + 1,
                });
            }
            tried.push(decode);
        }
        Ok(best_of(tried, Verdict::Unsure))
    }

    /// One whisper.cpp pass over the job's input in the language with id `language`;
    /// `None` when whisper heard no words.
    fn decode(
        &self,
        state: &mut WhisperState,
        job: &Job,
        language: i32,
        temperature: f32,
    ) -> Result<Option<Decode>, SttError> {
        // Beam search at temperature 0, as faster-whisper does; samples above it.
        let strategy = if temperature > 0.0 {
            SamplingStrategy::Greedy { best_of: SAMPLES }
        } else if self.settings.beam_size > 1 {
            SamplingStrategy::BeamSearch {
                beam_size: i32::try_from(self.settings.beam_size.min(MAX_BEAM_SIZE)).unwrap_or(1),
                patience: 1.0,
            }
        } else {
            SamplingStrategy::Greedy { best_of: 1 }
        };
        let mut params = FullParams::new(strategy);
        params.set_n_threads(i32::try_from(self.settings.threads).unwrap_or(1));
        params.set_language(whisper_rs::get_lang_str(language));
        // Fit the encoder to the utterance; 0 means the model's full window.
        params.set_audio_ctx(if job.audio_ctx >= self.model_ctx {
            0
        } else {
            job.audio_ctx as i32
        });
        params.set_no_context(true);
        params.set_no_timestamps(!self.settings.timestamps);
        params.set_single_segment(true);
        params.set_suppress_nst(true);
        params.set_print_special(false);
        params.set_print_progress(false);
        params.set_print_realtime(false);
        params.set_print_timestamps(false);
        // One temperature per call: the fallback is `guarded`'s.
        params.set_temperature(temperature);
        params.set_temperature_inc(0.0);
        params.set_max_tokens(i32::try_from(job.budget).unwrap_or(i32::MAX));
        // whisper.cpp drops a segment it judges silent by these (faster-whisper's rule).
        params.set_logprob_thold(LOGPROB_MIN);
        params.set_no_speech_thold(NO_SPEECH_MIN);
        let until: *const Until = &job.until;
        // SAFETY: the callback only reads `until`, which `job` keeps alive until
        // `full` returns; whisper.cpp calls it on this thread, during `full` only.
        unsafe {
            params.set_abort_callback(Some(past_deadline));
            params.set_abort_callback_user_data(until.cast_mut().cast::<c_void>());
        }
        let stop: *const LoopStop = &job.stop;
        // SAFETY: the filter only reads `job.stop` (alive until `full` returns) and
        // the token and logit arrays whisper.cpp passes it.
        unsafe {
            params.set_filter_logits_callback(Some(stop_loops));
            params.set_filter_logits_callback_user_data(stop.cast_mut().cast::<c_void>());
        }
        state.full(params, job.input).map_err(inference)?;
        read_decode(state, &job.stop, job.budget)
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

/// What one decode needs besides the language and temperature.
struct Job<'a> {
    input: &'a [f32],
    audio_ctx: usize,
    budget: usize,
    until: Until,
    stop: LoopStop,
}

/// When a transcription stops: its wall-clock limit, or its token cancelled.
struct Until {
    at: Instant,
    cancel: Cancel,
}

impl Until {
    /// Whether it is over, or will be after `more`.
    fn over_after(&self, more: Duration) -> bool {
        Instant::now() + more >= self.at || self.cancel.is_cancelled()
    }
}

/// What the logits filter needs to end a decode that has started to loop.
struct LoopStop {
    eot: i32,
    vocab: usize,
}

impl LoopStop {
    /// Whether `id` is a piece of text: Whisper numbers every special token (end of
    /// text, timestamps) after the end of text.
    fn is_text(&self, id: i32) -> bool {
        id < self.eot
    }
}

/// whisper.cpp's logits filter, called before each token is chosen: once the tokens so
/// far end with a run said twice, only the end of text may follow. The decode then
/// ends at once instead of filling its token budget, and its text fails the checks.
unsafe extern "C" fn stop_loops(
    _ctx: *mut whisper_rs::WhisperSysContext,
    _state: *mut whisper_rs::WhisperSysState,
    tokens: *const whisper_rs::WhisperTokenData,
    n_tokens: std::ffi::c_int,
    logits: *mut f32,
    stop: *mut c_void,
) {
    let n_tokens = usize::try_from(n_tokens).unwrap_or(0);
    if tokens.is_null() || logits.is_null() || n_tokens < 2 * REPEAT_TOKENS {
        return;
    }
    // SAFETY: whisper.cpp passes its decoder's `n_tokens` tokens and its `n_vocab`
    // logits, both alive for this call; `stop` is the `LoopStop` in `decode`'s job,
    // alive until `full` returns, and only read (decoders may call this from threads).
    let (tokens, stop) = unsafe {
        (
            std::slice::from_raw_parts(tokens, n_tokens),
            &*stop.cast::<LoopStop>(),
        )
    };
    // Timestamps differ each time a phrase comes round again; the words do not.
    let ids: Vec<i32> = tokens
        .iter()
        .map(|t| t.id)
        .filter(|&id| stop.is_text(id))
        .collect();
    if !ends_doubled(&ids) {
        return;
    }
    // SAFETY: as above.
    let logits = unsafe { std::slice::from_raw_parts_mut(logits, stop.vocab) };
    for (id, logit) in logits.iter_mut().enumerate() {
        if id != stop.eot as usize {
            *logit = f32::NEG_INFINITY;
        }
    }
}

/// Whether `ids` end with a run of [`REPEAT_TOKENS`] or more twice over.
fn ends_doubled(ids: &[i32]) -> bool {
    let n = ids.len();
    (REPEAT_TOKENS..=n / 2).any(|k| ids[n - k..] == ids[n - 2 * k..n - k])
}

/// whisper.cpp's abort callback: true once the transcription's time is up or it was
/// cancelled.
unsafe extern "C" fn past_deadline(until: *mut c_void) -> bool {
    // SAFETY: `decode` passes a pointer to an `Until` that outlives the call.
    let until = unsafe { &*until.cast::<Until>() };
    until.over_after(Duration::ZERO)
}

/// The likeliest of failed decodes that does not loop; else the phrase a loop repeats
/// from its first word (the likeliest such loop's), said once; else nothing.
fn best_of(tried: Vec<Decode>, verdict: Verdict) -> Guarded {
    let decodes = tried.len();
    let likelier = |a: &&Decode, b: &&Decode| a.avg_logprob.total_cmp(&b.avg_logprob);
    let best = tried
        .iter()
        .filter(|d| !d.loops())
        .max_by(likelier)
        .map(|d| (d.text.clone(), d.last_word_probability))
        .or_else(|| {
            tried
                .iter()
                .filter(|d| once(&d.text).is_some())
                .max_by(likelier)
                .and_then(|d| once(&d.text))
                // Its last word is a whole one: the phrase ended where it began again.
                .map(|text| (text, 1.0))
        });
    match best {
        Some((text, last_word_probability)) => Guarded {
            text,
            last_word_probability,
            verdict,
            decodes,
        },
        None => Guarded {
            text: String::new(),
            last_word_probability: 1.0,
            verdict: if verdict == Verdict::Unsure {
                Verdict::Garbled
            } else {
                verdict
            },
            decodes,
        },
    }
}

/// The finished decode in `state`: its text, how sure the decoder was of its last word,
/// the checks' figures. `None` when whisper.cpp kept no segment (no words, or judged
/// silent).
fn read_decode(
    state: &WhisperState,
    stop: &LoopStop,
    budget: usize,
) -> Result<Option<Decode>, SttError> {
    let mut text = String::new();
    let mut last_word_probability = 1.0f32;
    let mut logprob_sum = 0.0f64;
    let mut tokens = 0usize;
    let mut last_token = None;
    let mut ids = Vec::new();
    for segment in state.as_iter() {
        let piece = segment.to_str_lossy().map_err(inference)?;
        text.push_str(&piece);
        for token in (0..segment.n_tokens()).filter_map(|i| segment.get_token(i)) {
            // Every token the decoder chose, the end-of-text one too, as whisper.cpp
            // averages them.
            logprob_sum += f64::from(token.token_data().plog);
            tokens += 1;
            last_token = Some(token.token_id());
            if stop.is_text(token.token_id()) {
                ids.push(token.token_id());
            }
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
    if tokens == 0 {
        return Ok(None);
    }
    let text = text.trim().to_string();
    Ok(Some(Decode {
        compression_ratio: compression_ratio(&text),
        repeats: repeats_a_phrase(&text) || ends_doubled(&ids),
        // whisper.cpp ends a decode at the end of text, at a timestamp at the end of
        // the audio, or one token past `max_tokens`; only the last is cut short.
        cut: last_token != Some(stop.eot) && tokens >= budget,
        tokens,
        avg_logprob: (logprob_sum / tokens as f64) as f32,
        last_word_probability,
        text,
    }))
}

/// How many times smaller zlib makes `text` (at the default level, as `zlib.compress`
/// in openai-whisper and faster-whisper): repetition compresses well. flate2's miniz
/// encoder makes short texts a little larger than zlib does (a three-times loop of a
/// 40-character command: 2.39 here, 2.44 with zlib), which the repeat checks cover.
fn compression_ratio(text: &str) -> f64 {
    if text.is_empty() {
        return 0.0;
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let compressed = z
        .write_all(text.as_bytes())
        .and_then(|()| z.finish())
        .map_or(1, |c| c.len().max(1));
    text.len() as f64 / compressed as f64
}

/// A text that is one phrase over and over from its first word (the last time maybe
/// cut short), as the phrase said once: whisper that cannot find the end of a command
/// repeats the command. `None` for any other text.
fn once(text: &str) -> Option<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let plain: Vec<String> = words.iter().copied().map(plain_word).collect();
    let n = plain.len();
    let k = (1..=n / 2).find(|&k| (k..n).all(|i| plain[i] == plain[i % k]))?;
    Some(words[..k].join(" "))
}

/// A word without case or punctuation.
fn plain_word(word: &str) -> String {
    word.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// Whether [`REPEAT_WORDS`] or more words come twice in a row ("turn the heating up,
/// turn the heating up"), ignoring case and punctuation.
fn repeats_a_phrase(text: &str) -> bool {
    let words: Vec<String> = text
        .split_whitespace()
        .map(plain_word)
        .filter(|w| !w.is_empty())
        .collect();
    (REPEAT_WORDS..=words.len() / 2)
        .any(|n| (0..=words.len() - 2 * n).any(|i| words[i..i + n] == words[i + n..i + 2 * n]))
}

/// The tokens a decode of `samples` may produce: [`TOKENS_PER_SECOND`] of the audio
/// plus [`TOKEN_MARGIN`], at most whisper.cpp's own cap.
pub fn token_budget(samples: usize) -> usize {
    let seconds = samples as f64 / f64::from(SAMPLE_RATE);
    ((seconds * TOKENS_PER_SECOND).ceil() as usize + TOKEN_MARGIN).min(TOKENS_MAX)
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
    fn loops_are_recognised_in_the_text() {
        // What base q8_0 made of flite's awb voice saying it once.
        let looped = "Turn the kitchen lights down to half. Turn the kitchen lights down to half. Turn the kitchen lights down to half. Turn the kitchen lights down to half. Turn the kitchen lights down to half. Turn";
        assert!(compression_ratio(looped) > COMPRESSION_RATIO_MAX);
        assert!(compression_ratio("Turn the kitchen lights down to half.") < 1.0);
        assert!(repeats_a_phrase(
            "Turn the heating up by two degrees. Turn the heating up by two degrees."
        ));
        assert!(!repeats_a_phrase("Turn it up, turn it up."));
        assert!(!repeats_a_phrase("Set a timer for ten minutes."));
        assert!(!repeats_a_phrase(""));
        assert_eq!(
            once("Turn off the fan in the bedroom. Turn off the fan in the bedroom. Turn off the")
                .as_deref(),
            Some("Turn off the fan in the bedroom.")
        );
        assert_eq!(
            once("Open the door. Open the door.").as_deref(),
            Some("Open the door.")
        );
        assert_eq!(once("Turn it up, turn it down."), None);
        assert_eq!(once("Lights."), None);
        assert!(ends_doubled(&[9, 1, 2, 3, 4, 1, 2, 3, 4]));
        assert!(!ends_doubled(&[1, 2, 3, 4, 1, 2, 3, 5]));
        assert!(!ends_doubled(&[1, 2, 3, 1, 2, 3]));
    }

    #[test]
    fn the_token_budget_follows_the_audio() {
        let second = SAMPLE_RATE as usize;
        assert_eq!(token_budget(second), 20);
        assert_eq!(token_budget(4 * second), 50);
        assert_eq!(token_budget(60 * second), TOKENS_MAX);
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
