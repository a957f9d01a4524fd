//! Text to speech: a sentence in, audio out, through an external engine.
//!
//! Why external programs: espeak-ng is a Debian package of a few hundred kilobytes that
//! speaks in milliseconds on a Pi, and piper (far more natural, optional) ships as a
//! standalone binary with its voices; linking either would tie the daemon's build to
//! theirs. Each sentence is its own short run, so the first sentence of a reply is
//! playing while the model is still writing the rest ([`speaker`]). A program that is
//! missing, fails or hangs is an error naming it and the fix, never a stuck turn.
//!
//! - espeak-ng: `espeak-ng --stdout -v VOICE -s WPM`, text on stdin, a WAV on stdout.
//! - piper: `piper --model VOICE.onnx --output_raw`, text on stdin, raw 16-bit mono
//!   on stdout at the rate in the voice's `VOICE.onnx.json` (`audio.sample_rate`).
//!
//! A reply is spoken with a voice for the language the person spoke: `tts.voices` maps
//! a language to a voice; without an entry espeak-ng uses its own voice for that
//! language (it has about a hundred), piper the configured voice.

pub mod speaker;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use speaker::Speaker;

/// Which program speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// espeak-ng (Debian package `espeak-ng`): robotic, tiny, fast.
    EspeakNg,
    /// piper with an `.onnx` voice: natural, ~50 MB per voice.
    Piper,
    /// No speech: replies are only logged (a spoke without a speaker).
    None,
}

/// How to speak.
#[derive(Debug, Clone, PartialEq)]
pub struct TtsSettings {
    /// The engine.
    pub engine: Engine,
    /// The program to run; empty: `espeak-ng` or `piper` from `PATH`.
    pub program: PathBuf,
    /// espeak-ng: the voice (`en-us`, `en-gb+f3`...). piper: the `.onnx` voice file.
    pub voice: String,
    /// Voices for other languages, by language code (`de` -> `de` or a piper voice).
    pub voices: BTreeMap<String, String>,
    /// espeak-ng: words per minute.
    pub rate_wpm: u32,
    /// Longest a sentence may take to synthesise before the program is killed.
    pub timeout: Duration,
}

impl Default for TtsSettings {
    fn default() -> Self {
        TtsSettings {
            engine: Engine::EspeakNg,
            program: PathBuf::new(),
            voice: "en-us".into(),
            voices: BTreeMap::new(),
            rate_wpm: 175,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Synthesised audio: mono samples in `[-1, 1]` at `rate`.
#[derive(Debug, Clone, PartialEq)]
pub struct Speech {
    /// The samples.
    pub samples: Vec<f32>,
    /// Samples per second.
    pub rate: u32,
}

impl Speech {
    /// How long it plays.
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.samples.len() as f64 / f64::from(self.rate.max(1)))
    }
}

/// Why a sentence could not be spoken. Each names the program and what to do.
#[derive(Debug, thiserror::Error)]
pub enum TtsError {
    /// The program is not installed or not executable.
    #[error("cannot run the speech engine {program:?}: {source}; {hint}")]
    NotInstalled {
        program: String,
        hint: &'static str,
        source: std::io::Error,
    },
    /// The piper voice (or its `.json`) is missing or unreadable.
    #[error(
        "piper voice {path}: {message}; set tts.voice to a piper `.onnx` voice that has its `.onnx.json` beside it"
    )]
    Voice { path: PathBuf, message: String },
    /// The program exited with an error.
    #[error("the speech engine {program:?} failed ({status}): {stderr}")]
    Failed {
        program: String,
        status: String,
        stderr: String,
    },
    /// The program did not finish in time and was killed.
    #[error(
        "the speech engine {program:?} took longer than {timeout:?} for one sentence and was stopped"
    )]
    Timeout { program: String, timeout: Duration },
    /// The program's output is not audio this code reads.
    #[error("the speech engine {program:?} returned unreadable audio: {message}")]
    BadAudio { program: String, message: String },
    /// Speech is switched off (`tts.engine = "none"`).
    #[error("speech is switched off (tts.engine = \"none\")")]
    Off,
}

/// Turns text into [`Speech`] with the configured engine.
#[derive(Debug, Clone)]
pub struct Synth {
    settings: TtsSettings,
    program: String,
    /// piper: each voice's output rate, from its `.json`.
    piper_rates: BTreeMap<String, u32>,
    /// espeak-ng: its voices (`espeak-ng --voices`), each with the languages it
    /// serves and at which priority (lower first).
    espeak_languages: Vec<EspeakVoice>,
}

/// One line of `espeak-ng --voices`:
/// ` 5  fr-be  --/M  French_(Belgium)  roa/fr-BE  (fr 8)`.
#[derive(Debug, Clone)]
struct EspeakVoice {
    /// The language column, which `-v` takes.
    name: String,
    /// The other languages it serves, with their priority (lower is better).
    serves: Vec<(String, u32)>,
}

impl EspeakVoice {
    fn parse(line: &str) -> Option<EspeakVoice> {
        let name = line.split_whitespace().nth(1)?.to_string();
        let serves = line
            .split('(')
            .skip(1)
            .filter_map(|entry| {
                let (language, priority) = entry.split(')').next()?.split_once(' ')?;
                Some((language.to_string(), priority.trim().parse().ok()?))
            })
            .collect();
        Some(EspeakVoice { name, serves })
    }

    fn priority(&self, language: &str) -> Option<u32> {
        self.serves
            .iter()
            .find(|(l, _)| l == language)
            .map(|(_, p)| *p)
    }
}

impl Synth {
    /// Checks the engine once (the program runs, the piper voice is readable), so a
    /// broken set-up is reported at start, not at the first reply.
    pub fn new(settings: &TtsSettings) -> Result<Synth, TtsError> {
        let program = if settings.program.as_os_str().is_empty() {
            match settings.engine {
                Engine::Piper => "piper".to_string(),
                _ => "espeak-ng".to_string(),
            }
        } else {
            settings.program.display().to_string()
        };
        let mut synth = Synth {
            settings: settings.clone(),
            program,
            piper_rates: BTreeMap::new(),
            espeak_languages: Vec::new(),
        };
        match settings.engine {
            Engine::None => {}
            Engine::EspeakNg => {
                let listing = synth.run(&["--voices"], "")?;
                synth.espeak_languages = String::from_utf8_lossy(&listing)
                    .lines()
                    .skip(1)
                    .filter_map(EspeakVoice::parse)
                    .collect();
            }
            Engine::Piper => {
                for voice in std::iter::once(&settings.voice).chain(settings.voices.values()) {
                    let rate = piper_rate(Path::new(voice))?;
                    synth.piper_rates.insert(voice.clone(), rate);
                }
            }
        }
        Ok(synth)
    }

    /// The voice for `language` (a code such as `de`; `None`: the configured voice).
    pub fn voice_for(&self, language: Option<&str>) -> &str {
        let default = self.settings.voice.as_str();
        let Some(language) = language else {
            return default;
        };
        if let Some(voice) = self.settings.voices.get(language) {
            return voice;
        }
        if self.settings.engine != Engine::EspeakNg || language_of_voice(default) == language {
            return default;
        }
        // espeak-ng names voices by language (`de`) and says which other languages
        // each serves and how well: `fr-fr` is French's first choice, `fr-be` its
        // eighth, though `fr-be` sorts first.
        let dialect = format!("{language}-");
        self.espeak_languages
            .iter()
            .find(|v| v.name == language)
            .or_else(|| {
                self.espeak_languages
                    .iter()
                    .filter_map(|v| v.priority(language).map(|p| (p, v)))
                    .min_by_key(|(p, _)| *p)
                    .map(|(_, v)| v)
            })
            .or_else(|| {
                self.espeak_languages
                    .iter()
                    .find(|v| v.name.starts_with(&dialect))
            })
            .map_or(default, |v| v.name.as_str())
    }

    /// The engine in use.
    pub fn engine(&self) -> Engine {
        self.settings.engine
    }

    /// Speaks one sentence (or any text) into audio with the configured voice.
    pub fn synthesize(&self, text: &str) -> Result<Speech, TtsError> {
        self.synthesize_in(text, None)
    }

    /// Speaks `text` with the voice for `language` ([`Synth::voice_for`]).
    pub fn synthesize_in(&self, text: &str, language: Option<&str>) -> Result<Speech, TtsError> {
        let voice = self.voice_for(language);
        match self.settings.engine {
            Engine::None => Err(TtsError::Off),
            Engine::EspeakNg => {
                let rate = self.settings.rate_wpm.to_string();
                let wav = self.run(&["--stdout", "-v", voice, "-s", &rate], text)?;
                parse_wav(&wav).map_err(|message| TtsError::BadAudio {
                    program: self.program.clone(),
                    message,
                })
            }
            Engine::Piper => {
                let raw = self.run(&["--model", voice, "--output_raw", "--quiet"], text)?;
                Ok(Speech {
                    samples: s16le(&raw),
                    rate: self.piper_rates.get(voice).copied().unwrap_or(22_050),
                })
            }
        }
    }

    /// Runs the program with `text` on stdin and returns its stdout, within the timeout.
    fn run(&self, args: &[&str], text: &str) -> Result<Vec<u8>, TtsError> {
        let hint = match self.settings.engine {
            Engine::Piper => {
                "install piper (https://github.com/rhasspy/piper) or set tts.program to it"
            }
            _ => "install it (`apt install espeak-ng`) or set tts.program to it",
        };
        let mut child = Command::new(&self.program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| TtsError::NotInstalled {
                program: self.program.clone(),
                hint,
                source,
            })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let text = text.to_string();
        // Reading and writing on their own threads: a program that hangs is then
        // only a timeout, and a full pipe in one direction cannot deadlock the other.
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::spawn(move || {
            if let Some(mut stdin) = stdin {
                let _ = stdin.write_all(text.as_bytes());
            }
        });
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let mut err = Vec::new();
            if let Some(mut stdout) = stdout {
                let _ = stdout.read_to_end(&mut out);
            }
            if let Some(mut stderr) = stderr {
                let _ = stderr.read_to_end(&mut err);
            }
            let _ = done_tx.send((out, err));
        });
        let (out, err) = match done_rx.recv_timeout(self.settings.timeout) {
            Ok(result) => result,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(TtsError::Timeout {
                    program: self.program.clone(),
                    timeout: self.settings.timeout,
                });
            }
        };
        let status = child.wait().map_err(|source| TtsError::NotInstalled {
            program: self.program.clone(),
            hint,
            source,
        })?;
        if !status.success() {
            return Err(TtsError::Failed {
                program: self.program.clone(),
                status: status.to_string(),
                stderr: String::from_utf8_lossy(&err)
                    .trim()
                    .chars()
                    .take(500)
                    .collect(),
            });
        }
        Ok(out)
    }
}

/// The language an espeak-ng voice name speaks: `en-gb+f3` -> `en`.
fn language_of_voice(voice: &str) -> &str {
    voice.split(['-', '+']).next().unwrap_or(voice)
}

/// The sample rate a piper voice speaks at, from the `.onnx.json` beside it.
fn piper_rate(voice: &Path) -> Result<u32, TtsError> {
    let bad = |message: String| TtsError::Voice {
        path: voice.to_path_buf(),
        message,
    };
    if !voice.is_file() {
        return Err(bad("no such file".into()));
    }
    let mut json = voice.as_os_str().to_owned();
    json.push(".json");
    let text = std::fs::read_to_string(&json)
        .map_err(|e| bad(format!("cannot read {}: {e}", Path::new(&json).display())))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| bad(format!("{} is not JSON: {e}", Path::new(&json).display())))?;
    value["audio"]["sample_rate"]
        .as_u64()
        .and_then(|r| u32::try_from(r).ok())
        .filter(|r| (4_000..=192_000).contains(r))
        .ok_or_else(|| {
            bad(format!(
                "{} has no usable audio.sample_rate",
                Path::new(&json).display()
            ))
        })
}

fn s16le(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(2)
        .map(|b| f32::from(i16::from_le_bytes([b[0], b[1]])) / 32768.0)
        .collect()
}

/// Reads a WAV as a program writes it to a pipe: the data chunk's size may be a
/// placeholder (the program could not seek back), so the data runs to the end.
pub fn parse_wav(bytes: &[u8]) -> Result<Speech, String> {
    if bytes.len() < 12 || &bytes[0..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return Err(format!("not a WAV file ({} bytes)", bytes.len()));
    }
    let mut at = 12;
    let mut format: Option<(u16, u16, u32, u16)> = None;
    while at + 8 <= bytes.len() {
        let id = &bytes[at..at + 4];
        let size = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]);
        let body = at + 8;
        if id == b"data" {
            let (tag, channels, rate, bits) = format.ok_or("data before the fmt chunk")?;
            if tag != 1 || bits != 16 || channels == 0 {
                return Err(format!(
                    "format {tag}, {bits} bits, {channels} channel(s): only 16-bit PCM is read"
                ));
            }
            let end = body.saturating_add(size as usize).min(bytes.len());
            let interleaved = s16le(&bytes[body..end]);
            let samples = interleaved
                .chunks_exact(usize::from(channels))
                .map(|f| f.iter().sum::<f32>() / f32::from(channels))
                .collect();
            return Ok(Speech { samples, rate });
        }
        if id == b"fmt " {
            let f = bytes.get(body..body + 16).ok_or("fmt chunk cut short")?;
            format = Some((
                u16::from_le_bytes([f[0], f[1]]),
                u16::from_le_bytes([f[2], f[3]]),
                u32::from_le_bytes([f[4], f[5], f[6], f[7]]),
                u16::from_le_bytes([f[14], f[15]]),
            ));
        }
        // Chunks are padded to even sizes.
        at = body.saturating_add(size as usize + (size as usize & 1));
    }
    Err("no data chunk".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wav(channels: u16, rate: u32, data: &[i16], data_size: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(b"RIFF\xff\xff\xff\xffWAVEfmt ");
        b.extend_from_slice(&16u32.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&channels.to_le_bytes());
        b.extend_from_slice(&rate.to_le_bytes());
        b.extend_from_slice(&(rate * 2 * u32::from(channels)).to_le_bytes());
        b.extend_from_slice(&(2 * channels).to_le_bytes());
        b.extend_from_slice(&16u16.to_le_bytes());
        b.extend_from_slice(b"data");
        b.extend_from_slice(&data_size.to_le_bytes());
        for s in data {
            b.extend_from_slice(&s.to_le_bytes());
        }
        b
    }

    #[test]
    fn reads_a_piped_wav_with_a_placeholder_size() {
        let speech = parse_wav(&wav(1, 22_050, &[0, 16384, -16384], 0xffff_ffff)).unwrap();
        assert_eq!(speech.rate, 22_050);
        assert_eq!(speech.samples, vec![0.0, 0.5, -0.5]);
    }

    #[test]
    fn mixes_stereo_to_mono() {
        let speech = parse_wav(&wav(2, 16_000, &[16384, 0, -16384, -16384], 8)).unwrap();
        assert_eq!(speech.samples, vec![0.25, -0.5]);
    }

    #[test]
    fn rejects_what_is_not_a_wav() {
        assert!(parse_wav(b"hello").unwrap_err().contains("not a WAV"));
        let mut float = wav(1, 16_000, &[0], 2);
        float[20] = 3;
        assert!(parse_wav(&float).unwrap_err().contains("only 16-bit PCM"));
    }

    #[test]
    fn a_missing_program_names_itself_and_the_fix() {
        let settings = TtsSettings {
            program: "/nonexistent/espeak-ng".into(),
            ..TtsSettings::default()
        };
        let error = Synth::new(&settings).unwrap_err().to_string();
        assert!(error.contains("/nonexistent/espeak-ng"), "{error}");
        assert!(error.contains("apt install espeak-ng"), "{error}");
    }

    #[test]
    fn a_piper_voice_without_its_json_is_explained() {
        let dir = tempfile::tempdir().unwrap();
        let voice = dir.path().join("v.onnx");
        std::fs::write(&voice, b"x").unwrap();
        let settings = TtsSettings {
            engine: Engine::Piper,
            voice: voice.display().to_string(),
            ..TtsSettings::default()
        };
        let error = Synth::new(&settings).unwrap_err().to_string();
        assert!(error.contains("v.onnx.json"), "{error}");
        std::fs::write(
            dir.path().join("v.onnx.json"),
            r#"{"audio":{"sample_rate":16000}}"#,
        )
        .unwrap();
        assert_eq!(
            Synth::new(&settings).unwrap().piper_rates[&settings.voice],
            16_000
        );
    }

    #[test]
    fn a_hung_or_failing_engine_is_stopped_and_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path
        };
        let hung = Synth {
            settings: TtsSettings {
                program: script("hangs", "cat >/dev/null; sleep 30"),
                timeout: Duration::from_millis(300),
                ..TtsSettings::default()
            },
            program: dir.path().join("hangs").display().to_string(),
            piper_rates: BTreeMap::new(),
            espeak_languages: Vec::new(),
        };
        let started = std::time::Instant::now();
        let error = hung.synthesize("Hello.").unwrap_err();
        assert!(matches!(error, TtsError::Timeout { .. }), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let failing = Synth {
            settings: TtsSettings::default(),
            program: script("fails", "echo 'voice not found' >&2; exit 3")
                .display()
                .to_string(),
            piper_rates: BTreeMap::new(),
            espeak_languages: Vec::new(),
        };
        let error = failing.synthesize("Hello.").unwrap_err().to_string();
        assert!(
            error.contains("voice not found") && error.contains("fails"),
            "{error}"
        );
    }

    #[test]
    fn each_language_gets_a_voice_of_its_own() {
        let mut settings = TtsSettings {
            voice: "en-gb+f3".into(),
            ..TtsSettings::default()
        };
        settings.voices.insert("es".into(), "es-419".into());
        let synth = Synth::new(&settings).expect("espeak-ng is installed");
        assert_eq!(synth.voice_for(None), "en-gb+f3");
        assert_eq!(synth.voice_for(Some("en")), "en-gb+f3");
        assert_eq!(synth.voice_for(Some("de")), "de");
        assert_eq!(synth.voice_for(Some("fr")), "fr-fr");
        assert_eq!(synth.voice_for(Some("es")), "es-419");
        assert_eq!(synth.voice_for(Some("xx")), "en-gb+f3");
        let german = synth
            .synthesize_in("Das Licht ist an.", Some("de"))
            .unwrap();
        assert!(german.duration() > Duration::from_millis(500));
    }

    #[test]
    fn espeak_speaks_a_sentence() {
        let synth = Synth::new(&TtsSettings::default()).expect("espeak-ng is installed");
        let speech = synth.synthesize("The kitchen light is on.").unwrap();
        assert_eq!(speech.rate, 22_050);
        let secs = speech.duration().as_secs_f64();
        assert!((0.8..4.0).contains(&secs), "{secs} s");
        let peak = speech.samples.iter().fold(0f32, |m, s| m.max(s.abs()));
        assert!(peak > 0.1, "peak {peak}");
    }
}
