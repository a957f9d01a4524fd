//! The long-running spoke.
//!
//! [`Spoke`] is the part without audio: skills with hot reload and the MQTT link.
//! `serve` is that alone (a TV box or media server that hosts skills but has no
//! microphone); `run` adds the voice loop ([`voice`]) on top and talks to systemd
//! ([`systemd`]). Each owns its tasks and ends them in order on SIGTERM or SIGINT:
//! the turn in progress is abandoned (and the code it runs cancelled), speech stops,
//! hot reload stops, `offline` is published, the connection closes.
//!
//! - [`answer`]: yes or no from a spoken answer (confirming by voice).
//! - [`listener`]: frames to commands (wake word, then end of speech).
//! - [`voice`]: commands to spoken replies, and the loop that ties it all together.
//! - [`systemd`]: readiness, status, watchdog over `NOTIFY_SOCKET`.

pub mod answer;
mod arbiter;
mod audio_loop;
mod conversation;
pub mod listener;
pub mod phrases;
pub mod pipeline;
mod ringing;
mod routing;
pub mod systemd;
pub mod turn_end;
pub mod voice;
mod words;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::agent::Agent;
use crate::audio::Capture;
use crate::audio::playback::{Output, Player};
use crate::config::{Config, ConfigError};
use crate::host::schedule::{ScheduleFile, Scheduler};
use crate::host::spoken::Spoken;
use crate::hub::{HubClient, HubError};
use crate::mqtt::{Link, LinkSettings, MqttError, Role};
use crate::sandbox::Sandbox;
use crate::skills::policy::{Confirm, NeverConfirm};
use crate::skills::watch::{LiveRegistry, Watcher};
use crate::stt::{SttError, Transcriber};
use crate::tts::{Speaker, Synth, TtsError};
use crate::wake::{Detector, WakeError};
use listener::Listener;
use pipeline::Pipeline;
use systemd::Notifier;
use voice::{Ears, Voice, VoiceSettings};

/// `run` gives its parts this long to stop on SIGTERM (systemd's patience is longer,
/// but a voice assistant that lingers is one that cannot be restarted quickly).
const SHUTDOWN_LIMIT: Duration = Duration::from_millis(1_800);

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The MQTT settings are unusable.
    #[error(transparent)]
    Mqtt(#[from] MqttError),
    /// Signal handlers could not be installed.
    #[error("cannot listen for SIGTERM/SIGINT/SIGHUP: {0}")]
    Signals(std::io::Error),
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
    /// A thread could not be started.
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
    /// The skill-search embedding model could not be loaded.
    #[error(transparent)]
    Embed(#[from] crate::embed::EmbedError),
    /// The MCP servers file is unusable.
    #[error(transparent)]
    Mcp(#[from] crate::mcp::McpError),
}

/// The running parts of a spoke.
pub struct Spoke {
    /// The skills in service, kept current by hot reload.
    pub skills: Arc<LiveRegistry>,
    /// The MQTT link, unless in local mode.
    pub link: Option<Link>,
    stop: watch::Sender<bool>,
    watcher: tokio::task::JoinHandle<()>,
    scheduler: tokio::task::JoinHandle<()>,
    mcp: Option<crate::mcp::Mcp>,
}

impl Spoke {
    /// Loads the skills, starts hot reload, the schedule and (when a broker is
    /// configured) the MQTT link, on the current tokio runtime. `confirm` asks the local
    /// user before `@confirm` functions run for other devices. `voice` is where skills'
    /// speech and due timers go; without one (`serve`) skills cannot speak and due
    /// timers are only logged.
    pub fn start(
        config: &Config,
        confirm: Arc<dyn Confirm>,
        voice: Option<mpsc::Sender<Spoken>>,
    ) -> Result<Spoke, DaemonError> {
        let settings = LinkSettings::from_config(config)?;
        let host = config.host_settings();
        let services = host.services.clone();
        let (stop, stop_rx) = watch::channel(false);
        let due = match voice {
            Some(voice) => {
                services.set_speech(voice.clone());
                voice
            }
            None => mute(stop_rx.clone()),
        };
        let scheduler = Scheduler::new(
            ScheduleFile::new(&host.data_dir, host.schedule),
            Duration::from_millis(config.timers.missed_ms),
            services.schedule_changed(),
        );
        let scheduler = tokio::spawn(scheduler.run(due, stop_rx.clone()));
        // Before the skills load, so that their text is embedded as they are indexed.
        crate::embed::install(config.search.embedding_model.as_deref())?;
        let (watcher, errors) = Watcher::start(&config.skills.dir, &host);
        for error in &errors {
            tracing::warn!(%error, "skill file skipped");
        }
        let skills = watcher.live();
        let functions: usize = skills
            .current()
            .classes()
            .iter()
            .map(|c| c.functions.len())
            .sum();
        tracing::info!(dir = %config.skills.dir.display(), functions, "skills loaded; watching for changes");
        let link = match settings {
            Some(settings) => {
                tracing::info!(broker = %format!("{}:{}", settings.broker.host, settings.broker.port), device_id = %settings.device_id, "starting the MQTT link");
                Some(Link::start(
                    settings,
                    Role::Spoke {
                        skills: skills.clone(),
                        confirm,
                    },
                ))
            }
            None => {
                tracing::info!(
                    "no MQTT broker configured (mqtt.broker): local mode, skills are not shared with other devices"
                );
                None
            }
        };
        if let Some(link) = &link {
            services.set_household(Arc::new(link.clone()));
        }
        let republish = link.clone();
        let republish = move || {
            if let Some(link) = &republish {
                link.republish();
            }
        };
        // In the background: a server that is slow to start does not hold up READY.
        let mcp = crate::mcp::Mcp::start(&config.mcp, skills.clone(), republish.clone())?;
        let watcher = tokio::spawn(watcher.run(stop_rx, republish));
        Ok(Spoke {
            skills,
            link,
            stop,
            watcher,
            scheduler,
            mcp,
        })
    }

    /// Stops hot reload, the schedule and the MCP servers, and closes the link cleanly.
    pub async fn shutdown(self) {
        self.stop.send_replace(true);
        let _ = self.watcher.await;
        let _ = self.scheduler.await;
        if let Some(mcp) = self.mcp {
            mcp.shutdown().await;
        }
        if let Some(link) = &self.link {
            link.shutdown().await;
        }
    }
}

/// Where due timers go on a spoke without a voice: the log, so they are not silently
/// lost. Ends with `stop`.
fn mute(mut stop: watch::Receiver<bool>) -> mpsc::Sender<Spoken> {
    let (tx, mut rx) = mpsc::channel(crate::host::spoken::SPEECH_QUEUE);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                item = rx.recv() => match item {
                    Some(Spoken::Due(due)) => tracing::warn!(
                        skill = %due.entry.skill,
                        "came due, but this spoke has no voice to ring it (`serve` runs without audio; use `run`): {}",
                        due.line()
                    ),
                    Some(_) => {}
                    None => return,
                },
            }
        }
    });
    tx
}

/// `strawberry-spoke serve`: runs until SIGTERM or SIGINT, then shuts down cleanly.
pub async fn serve(config: &Config, confirm: Arc<dyn Confirm>) -> Result<(), DaemonError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signals)?;
    let spoke = Spoke::start(config, confirm, None)?;
    tracing::info!(device = %config.device.name, "serving");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    spoke.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

/// Everything `run` starts from one configuration.
struct Running {
    spoke: Spoke,
    voice: Voice,
    idle_status: String,
}

impl Running {
    async fn start(config: &Config, notifier: Arc<Notifier>) -> Result<Running, DaemonError> {
        let stt_settings = config.stt.settings();
        let transcriber = tokio::task::spawn_blocking(move || Transcriber::load(&stt_settings))
            .await
            .map_err(|e| DaemonError::Thread(std::io::Error::other(e)))??;
        tracing::info!(
            model = %config.stt.model.display(),
            load_ms = transcriber.load_time().as_millis() as u64,
            "speech-to-text model loaded"
        );
        let word = config.wake.word()?;
        let detector = Detector::with_word(&config.wake.settings(), &word)?;
        let synth = Synth::new(&config.tts.settings())?;
        let sandbox = Sandbox::new(config.sandbox.limits())
            .map_err(|e| DaemonError::Sandbox(e.to_string()))?;
        let hub = HubClient::new(&config.hub)?;
        let (speech, spoken) = mpsc::channel(crate::host::spoken::SPEECH_QUEUE);
        let spoke = Spoke::start(config, Arc::new(NeverConfirm), Some(speech))?;
        let mut agent = Agent::live(config, hub, Arc::new(sandbox), spoke.skills.clone());
        if let Some(link) = &spoke.link {
            agent = agent.with_link(link.clone());
        }
        let volume = config.audio.volume as f32 / 100.0;
        let player: Arc<dyn Output> =
            Arc::new(Player::start(&config.audio.output, volume).map_err(DaemonError::Thread)?);
        let speaker = Arc::new(
            Speaker::start(synth, player, config.audio.cues).map_err(DaemonError::Thread)?,
        );
        let pipeline = Arc::new(Pipeline::new(
            Arc::new(transcriber),
            agent,
            speaker,
            &config.wake.stop_phrases,
        ));
        let capture =
            Capture::start(config.audio.capture_settings()).map_err(DaemonError::Thread)?;
        let listener = Listener::new(detector, config.vad.settings(), config.audio.pre_roll_ms);
        let settings = VoiceSettings {
            interrupt: config.wake.interrupt,
            follow_up_ms: config.vad.follow_up_ms,
            confirm_ms: config.vad.confirm_ms,
            ring_ms: config.timers.ring_ms,
            arbitration_ms: config.wake.arbitration_ms,
        };
        let ears = Ears {
            capture,
            listener,
            wake_name: word.name().to_string(),
        };
        let voice = Voice::start(
            pipeline,
            ears,
            settings,
            notifier,
            spoken,
            spoke.link.clone(),
        )
        .map_err(DaemonError::Thread)?;
        Ok(Running {
            spoke,
            voice,
            idle_status: format!("Listening for \"{}\"", word.name()),
        })
    }

    /// Stops the voice loop, then the skills and the link; gives up waiting after
    /// [`SHUTDOWN_LIMIT`] (the process is about to end anyway).
    async fn shutdown(self) {
        let stopping = async {
            self.voice.shutdown().await;
            self.spoke.shutdown().await;
        };
        if tokio::time::timeout(SHUTDOWN_LIMIT, stopping)
            .await
            .is_err()
        {
            tracing::warn!("parts did not stop within {SHUTDOWN_LIMIT:?}; exiting anyway");
        }
    }
}

/// Feeds the systemd watchdog while both loops beat; stops (so systemd restarts the
/// service) when one is stuck for longer than the watchdog interval.
fn watchdog(notifier: Arc<Notifier>, voice: &Voice) -> Option<tokio::task::JoinHandle<()>> {
    let interval = notifier.watchdog()?;
    let (audio, turn) = (voice.audio_beat.clone(), voice.turn_beat.clone());
    // The loops beat every 0.1-0.5 s; a short watchdog interval must not make their
    // normal rhythm look like a hang.
    let limit = (interval / 2).max(Duration::from_secs(2));
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval / 3);
        let mut warned = false;
        loop {
            tick.tick().await;
            let stuck = [("audio", audio.age()), ("conversation", turn.age())]
                .into_iter()
                .find(|(_, age)| *age >= limit);
            match stuck {
                None => {
                    notifier.keep_alive();
                    warned = false;
                }
                Some((stage, age)) if !warned => {
                    tracing::error!(
                        "the {stage} loop has not made progress for {:.1} s: no longer feeding the watchdog, systemd will restart the service",
                        age.as_secs_f64()
                    );
                    notifier.status(&format!("Stuck: the {stage} loop stopped"));
                    warned = true;
                }
                Some(_) => {}
            }
        }
    }))
}

/// `strawberry-spoke run`: the voice assistant, until SIGTERM or SIGINT. SIGHUP
/// reloads the configuration from `config_path` (a broken file is reported and the
/// running configuration kept).
pub async fn run(config_path: Option<PathBuf>, config: Config) -> Result<(), DaemonError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signals)?;
    let mut hup = signal(SignalKind::hangup()).map_err(DaemonError::Signals)?;
    let notifier = Arc::new(Notifier::from_env());
    let mut config = config;
    // The configuration that ran before a reload, to go back to if the new one fails.
    let mut fallback: Option<Config> = None;
    loop {
        let running = match Running::start(&config, notifier.clone()).await {
            Ok(running) => running,
            Err(error) => match fallback.take() {
                Some(previous) => {
                    tracing::error!(
                        "the reloaded configuration does not start ({error}); going back to the previous one"
                    );
                    config = previous;
                    continue;
                }
                None => {
                    notifier.status(&format!("Failed to start: {error}"));
                    return Err(error);
                }
            },
        };
        let dog = watchdog(notifier.clone(), &running.voice);
        notifier.ready(&running.idle_status);
        tracing::info!(device = %config.device.name, systemd = notifier.active(), "ready: {}", running.idle_status);
        let next = loop {
            tokio::select! {
                _ = term.recv() => break None,
                _ = int.recv() => break None,
                _ = hup.recv() => {
                    notifier.reloading();
                    match reload(config_path.as_deref()) {
                        Ok(new) => break Some(new),
                        Err(error) => {
                            tracing::error!("configuration not reloaded, the running one stays: {error}");
                            notifier.ready(&running.idle_status);
                        }
                    }
                }
            }
        };
        if let Some(dog) = dog {
            dog.abort();
        }
        match next {
            None => {
                tracing::info!("shutting down");
                notifier.stopping();
                running.shutdown().await;
                tracing::info!("stopped");
                return Ok(());
            }
            Some(new) => {
                tracing::info!("SIGHUP: restarting with the reloaded configuration");
                running.shutdown().await;
                fallback = Some(std::mem::replace(&mut config, new));
            }
        }
    }
}

fn reload(path: Option<&std::path::Path>) -> Result<Config, ConfigError> {
    Config::load(path, std::env::vars())
}
