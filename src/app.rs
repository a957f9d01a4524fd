//! One place that builds the spoke's parts from its configuration.
//!
//! Every command (`run`, `serve`, `listen`, `ask`/`chat`/`prompt`, `exec`, the
//! `skills` commands), the benchmarks and the test harness make what they need through
//! [`Parts`], so a part is made the same way everywhere, from the same settings, with
//! its collaborators given when it is made. Adding a part means adding a method here.
//! The settings each part is made from come from the configuration in one style
//! (`config/settings.rs`; docs/architecture.md, "From configuration to parts").
//! What is expensive and shared between parts is loaded once per configuration when
//! the `Parts` are made: the embedding model skill search ranks by meaning with (kept
//! across a reload that does not change `search.embedding_model`).
//!
//! One collaborator is late: the other spokes ([`Services::set_household`]). The MQTT
//! link serves the skills, whose host functions reach the link, so the link is made
//! after the skills and handed to them once it exists.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::audio::Capture;
use crate::audio::echo::Canceller;
use crate::audio::playback::{Output, Player};
use crate::config::Config;
use crate::daemon::listener::Listener;
use crate::daemon::pipeline::{Ear, Pipeline};
use crate::embed::{EmbedError, SearchModel};
use crate::host::HostSettings;
use crate::host::services::Services;
use crate::host::spoken::Spoken;
use crate::hub::{HubClient, HubError};
use crate::mcp::{Mcp, McpError};
use crate::mqtt::{Link, LinkSettings, MqttError, Role};
use crate::sandbox::Sandbox;
use crate::skills::watch::{LiveRegistry, Watcher};
use crate::skills::{LoadError, Registry, SkillClass};
use crate::stt::{SttError, Transcriber};
use crate::tts::{Speaker, Synth, TtsError};
use crate::wake::{Detector, WakeError, WakeWord};

/// Why a part could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PartError {
    /// The MQTT settings are unusable.
    #[error(transparent)]
    Mqtt(#[from] MqttError),
    /// The speech-to-text model could not be loaded.
    #[error(transparent)]
    Stt(#[from] SttError),
    /// The wake word could not be loaded.
    #[error(transparent)]
    Wake(#[from] WakeError),
    /// The speech engine is unusable.
    #[error("{0} (or set tts.engine = \"none\" to run without speech)")]
    Tts(#[from] TtsError),
    /// The hub settings are unusable.
    #[error(transparent)]
    Hub(#[from] HubError),
    /// The sandbox could not start.
    #[error("cannot start the sandbox: {0}")]
    Sandbox(String),
    /// A thread or device could not be started.
    #[error("cannot start {what}: {error}")]
    Start {
        /// What.
        what: &'static str,
        /// Why.
        #[source]
        error: std::io::Error,
    },
    /// The skill-search embedding model could not be loaded.
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// The MCP servers file is unusable.
    #[error(transparent)]
    Mcp(#[from] McpError),
}

/// Builds the parts of a spoke from one configuration. Cheap to clone.
#[derive(Clone)]
pub struct Parts {
    config: Config,
    host: HostSettings,
}

impl Parts {
    /// The parts of `config`, loading the embedding model it names.
    pub fn new(config: &Config) -> Result<Parts, PartError> {
        Parts::after(config, None)
    }

    /// Like [`Parts::new`] after `previous` ran (a reload): the embedding model is kept
    /// when `search.embedding_model` did not change.
    pub fn after(config: &Config, previous: Option<&Parts>) -> Result<Parts, PartError> {
        let search = SearchModel::load(
            config.search.embedding_model.as_deref(),
            previous.map(|p| &p.host.search),
        )?;
        Ok(Parts {
            host: HostSettings {
                search,
                ..config.host_settings()
            },
            config: config.clone(),
        })
    }

    /// Parts with an embedding model already loaded (benchmarks and tests that load it
    /// once for many configurations).
    pub fn with_search(config: &Config, search: SearchModel) -> Parts {
        Parts {
            host: HostSettings {
                search,
                ..config.host_settings()
            },
            config: config.clone(),
        }
    }

    /// Gives skills a voice: what they `say`, announce or schedule goes to `speech`.
    /// Before any skill is loaded (they keep the services they were loaded with).
    pub fn speaking_to(mut self, speech: mpsc::Sender<Spoken>) -> Parts {
        self.host.services = Services::with_speech(speech);
        self
    }

    /// The configuration the parts are made from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// What skills may do on the host, and the services they share.
    pub fn host(&self) -> &HostSettings {
        &self.host
    }

    /// The skill files of `dir`; the broken ones come back as errors.
    pub fn skills_in(&self, dir: &Path) -> (Registry, Vec<LoadError>) {
        Registry::load(dir, &self.host)
    }

    /// One skill file on its own.
    pub fn skill_file(&self, path: &Path) -> Result<SkillClass, LoadError> {
        Registry::load_file(path, &self.host)
    }

    /// The configured skills with hot reload (run [`Watcher::run`] to keep them current).
    pub fn watcher(&self) -> (Watcher, Vec<LoadError>) {
        Watcher::start(&self.config.skills.dir, &self.host)
    }

    /// The sandbox model code runs in.
    pub fn sandbox(&self) -> Result<Sandbox, PartError> {
        Sandbox::new(self.config.sandbox.settings()).map_err(|e| PartError::Sandbox(e.to_string()))
    }

    /// The client of the hub's language model.
    pub fn hub(&self) -> Result<HubClient, PartError> {
        Ok(HubClient::new(&self.config.hub.settings())?)
    }

    /// The agent that runs turns over `skills`, reaching other spokes through `link`;
    /// its sandbox runs stop when `stop` is cancelled.
    pub fn agent(
        &self,
        skills: Arc<LiveRegistry>,
        link: Option<&Link>,
        stop: CancellationToken,
    ) -> Result<Agent, PartError> {
        let agent = Agent::live(
            &self.config.agent_settings(),
            self.hub()?,
            Arc::new(self.sandbox()?),
            skills,
        )
        .with_stop(stop);
        Ok(match link {
            Some(link) => agent.with_link(link.clone()),
            None => agent,
        })
    }

    /// The MQTT link in `role`, when a broker is configured (`None`: local mode). A
    /// spoke's skills reach the other spokes through it from then on.
    pub fn link(&self, role: Role) -> Result<Option<Link>, PartError> {
        let Some(settings) = self.config.link_settings()? else {
            return Ok(None);
        };
        let settings = LinkSettings {
            search: self.host.search.clone(),
            ..settings
        };
        tracing::info!(broker = %format!("{}:{}", settings.broker.host, settings.broker.port), device_id = %settings.device_id, "starting the MQTT link");
        let link = Link::start(settings, role);
        self.host.services.set_household(Arc::new(link.clone()));
        Ok(Some(link))
    }

    /// The MCP servers of `mcp.config_file` as classes of `skills`; `on_change` runs
    /// after each change of their tools. They stop when `stop` is cancelled.
    pub fn mcp(
        &self,
        skills: &Arc<LiveRegistry>,
        on_change: impl Fn() + Send + Sync + 'static,
        stop: &CancellationToken,
    ) -> Result<Option<Mcp>, PartError> {
        let Some(settings) = self.config.mcp.settings() else {
            return Ok(None);
        };
        Ok(Some(Mcp::start(
            &settings,
            skills.clone(),
            on_change,
            stop,
        )?))
    }

    /// The speech-to-text model (seconds to load: call it off the async workers).
    pub fn transcriber(&self) -> Result<Transcriber, PartError> {
        let transcriber = Transcriber::load(&self.config.stt.settings())?;
        tracing::info!(
            model = %self.config.stt.model.display(),
            load_ms = transcriber.load_time().as_millis() as u64,
            "speech-to-text model loaded"
        );
        Ok(transcriber)
    }

    /// The wake word and a detector for it.
    pub fn wake_word(&self) -> Result<(WakeWord, Detector), PartError> {
        let word = self.config.wake.word()?;
        let detector = Detector::with_word(&self.config.wake.settings(), &word)?;
        Ok((word, detector))
    }

    /// What finds the wake word and the command after it in the microphone's frames,
    /// and with `wake.stop_word` the stop word over a ring.
    pub fn listener(&self, detector: Detector) -> Result<Listener, PartError> {
        Ok(Listener::new(
            detector,
            self.config.vad.settings(),
            self.config.audio.pre_roll_ms,
        )
        .with_stop_word(self.config.wake.stop_detector()?))
    }

    /// The microphone.
    pub fn capture(&self) -> Result<Capture, PartError> {
        Capture::start(self.config.audio.capture_settings()).map_err(|error| PartError::Start {
            what: "the microphone thread",
            error,
        })
    }

    /// The sound card replies are played on and, with `audio.echo_cancel`, the echo
    /// canceller that what it plays is the reference of (for the capture path; `None`,
    /// logged, when it is off or cannot start).
    pub fn player(&self) -> Result<(Player, Option<Canceller>), PartError> {
        let player = Player::start(&self.config.audio.output, self.volume()).map_err(|error| {
            PartError::Start {
                what: "the playback thread",
                error,
            }
        })?;
        if !self.config.audio.echo_cancel {
            tracing::info!(
                "echo cancellation is off (audio.echo_cancel = false): the spoke hears itself while it talks"
            );
            return Ok((player, None));
        }
        match crate::audio::echo::pair() {
            Ok((reference, canceller)) => {
                player.feed_echo(reference);
                tracing::info!("echo cancellation on (WebRTC AEC3, sonora's Rust port)");
                Ok((player, Some(canceller)))
            }
            Err(error) => {
                tracing::error!("{error}");
                Ok((player, None))
            }
        }
    }

    /// The output volume, 0-1.
    pub fn volume(&self) -> f32 {
        self.config.audio.volume as f32 / 100.0
    }

    /// The voice, speaking to `output`.
    pub fn speaker(&self, output: Arc<dyn Output>) -> Result<Speaker, PartError> {
        let synth = Synth::new(&self.config.tts.settings())?;
        Speaker::start(synth, output, self.config.audio.cues).map_err(|error| PartError::Start {
            what: "the speech thread",
            error,
        })
    }

    /// One command from audio to reply; `ear` hears the answers to its questions.
    pub fn pipeline(
        &self,
        transcriber: Arc<Transcriber>,
        agent: Agent,
        speaker: Arc<Speaker>,
        ear: Option<Arc<dyn Ear>>,
    ) -> Pipeline {
        Pipeline::new(
            transcriber,
            agent,
            speaker,
            &self.config.wake.stop_phrases,
            ear,
        )
    }
}
