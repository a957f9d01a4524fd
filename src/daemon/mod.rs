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
//! - [`echo`]: the echo canceller on the capture path, and its trouble in the status.
//! - [`listener`]: frames to commands (wake word, then end of speech).
//! - [`voice`]: commands to spoken replies, and the loop that ties it all together.
//! - [`systemd`]: readiness, status, watchdog over `NOTIFY_SOCKET`.

pub mod answer;
mod arbiter;
mod audio_loop;
mod conversation;
pub mod echo;
pub mod listener;
pub mod phrases;
pub mod pipeline;
mod ringing;
mod routing;
mod signals;
pub mod systemd;
pub mod turn_end;
pub mod voice;
mod words;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::app::{PartError, Parts};
use crate::audio::playback::Output;
use crate::config::{Config, ConfigError};
use crate::host::schedule::{ScheduleFile, Scheduler};
use crate::host::spoken::Spoken;
use crate::mqtt::{Link, Role};
use crate::skills::policy::{Confirm, NeverConfirm};
use crate::skills::watch::LiveRegistry;
use signals::{Signal, Signals};
use systemd::Notifier;
use voice::{Ears, Voice};

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Signal handlers could not be installed.
    #[error("cannot listen for SIGTERM/SIGINT/SIGHUP: {0}")]
    Signals(std::io::Error),
    /// A part could not be made.
    #[error(transparent)]
    Part(#[from] PartError),
}

/// The running parts of a spoke.
pub struct Spoke {
    /// The skills in service, kept current by hot reload.
    pub skills: Arc<LiveRegistry>,
    /// The MQTT link, unless in local mode.
    pub link: Option<Link>,
    stop: CancellationToken,
    /// Hot reload, the schedule, and (without a voice) the log of due timers.
    tasks: JoinSet<()>,
    mcp: Option<crate::mcp::Mcp>,
}

impl Spoke {
    /// Loads the skills, starts hot reload, the schedule and (when a broker is
    /// configured) the MQTT link, on the current tokio runtime. `confirm` asks the local
    /// user before `@confirm` functions run for other devices. Skills' speech and due
    /// timers go where `parts` send speech ([`Parts::speaking_to`]); without a voice
    /// (`serve`) skills cannot speak and due timers are only logged. Everything it
    /// starts stops when `stop` is cancelled; [`Spoke::shutdown`] waits for that and
    /// closes the link.
    pub fn start(
        parts: &Parts,
        confirm: Arc<dyn Confirm>,
        stop: CancellationToken,
    ) -> Result<Spoke, PartError> {
        let config = parts.config();
        let host = parts.host();
        let mut tasks = JoinSet::new();
        let due = match host.services.speech() {
            Some(voice) => voice.clone(),
            None => mute(&mut tasks, stop.clone()),
        };
        let scheduler = Scheduler::new(
            ScheduleFile::new(&host.data_dir, host.schedule),
            Duration::from_millis(config.timers.missed_ms),
            host.services.schedule_changed(),
        );
        tasks.spawn(scheduler.run(due, stop.clone()));
        host.search.warn_if_lexical();
        let (watcher, errors) = parts.watcher();
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
        let link = parts.link(Role::Spoke {
            skills: skills.clone(),
            confirm,
        })?;
        if link.is_none() {
            tracing::info!(
                "no MQTT broker configured (mqtt.broker): local mode, skills are not shared with other devices"
            );
        }
        let republish = link.clone();
        let republish = move || {
            if let Some(link) = &republish {
                link.republish();
            }
        };
        // In the background: a server that is slow to start does not hold up READY.
        let mcp = parts.mcp(&skills, republish.clone(), &stop)?;
        tasks.spawn(watcher.run(stop.clone(), republish));
        Ok(Spoke {
            skills,
            link,
            stop,
            tasks,
            mcp,
        })
    }

    /// Stops hot reload, the schedule and the MCP servers, waits for them, and closes
    /// the link cleanly (`offline` is published first).
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
        if let Some(mcp) = self.mcp {
            mcp.shutdown().await;
        }
        if let Some(link) = &self.link {
            link.shutdown().await;
        }
    }
}

/// Where due timers go on a spoke without a voice: the log, so they are not silently
/// lost. A task in `tasks` that ends with `stop`.
fn mute(tasks: &mut JoinSet<()>, stop: CancellationToken) -> mpsc::Sender<Spoken> {
    let (tx, mut rx) = mpsc::channel(crate::host::spoken::SPEECH_QUEUE);
    tasks.spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
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

/// `strawberry-spoke serve`: the skills and the link without audio, until SIGTERM or
/// SIGINT. SIGHUP reloads the configuration from `config_path`, as for `run`.
pub async fn serve(
    config_path: Option<PathBuf>,
    config: Config,
    confirm: Arc<dyn Confirm>,
) -> Result<(), DaemonError> {
    supervise::<Serving>(config_path, config, confirm).await
}

/// What `serve` runs from one configuration.
struct Serving {
    spoke: Spoke,
    status: String,
}

impl Service for Serving {
    type With = Arc<dyn Confirm>;

    async fn start(
        parts: &Parts,
        confirm: &Arc<dyn Confirm>,
        _: &Arc<Notifier>,
        stop: CancellationToken,
    ) -> Result<Serving, PartError> {
        Ok(Serving {
            spoke: Spoke::start(parts, confirm.clone(), stop)?,
            status: "Serving skills".into(),
        })
    }

    fn status(&self) -> &str {
        &self.status
    }

    async fn shutdown(self) {
        self.spoke.shutdown().await;
    }
}

/// Everything `run` starts from one configuration.
struct Running {
    spoke: Spoke,
    voice: Voice,
    watchdog: Option<tokio::task::JoinHandle<()>>,
    idle_status: String,
}

impl Service for Running {
    type With = ();

    async fn start(
        parts: &Parts,
        _: &(),
        notifier: &Arc<Notifier>,
        stop: CancellationToken,
    ) -> Result<Running, PartError> {
        let loading = parts.clone();
        let transcriber = tokio::task::spawn_blocking(move || loading.transcriber())
            .await
            .map_err(|e| PartError::Start {
                what: "loading the speech-to-text model",
                error: std::io::Error::other(e),
            })??;
        let (word, detector) = parts.wake_word()?;
        let (speech, spoken) = mpsc::channel(crate::host::spoken::SPEECH_QUEUE);
        let parts = parts.clone().speaking_to(speech);
        let spoke = Spoke::start(&parts, Arc::new(NeverConfirm), stop.clone())?;
        let agent = parts.agent(spoke.skills.clone(), spoke.link.as_ref(), stop.clone())?;
        let (player, echo) = parts.player()?;
        let speaker = Arc::new(parts.speaker(Arc::new(player) as Arc<dyn Output>)?);
        let (ear, asks) = voice::ear();
        let pipeline = Arc::new(parts.pipeline(Arc::new(transcriber), agent, speaker, Some(ear)));
        let ears = Ears {
            capture: parts.capture()?,
            listener: parts.listener(detector)?,
            wake_name: word.name().to_string(),
            asks,
            echo,
        };
        let voice = Voice::start(
            stop.clone(),
            pipeline,
            ears,
            parts.config().voice_settings(),
            notifier.clone(),
            spoken,
            spoke.link.clone(),
        )
        .map_err(|error| PartError::Start {
            what: "the voice loop",
            error,
        })?;
        let watchdog = watchdog(notifier.clone(), &voice, stop);
        Ok(Running {
            spoke,
            voice,
            watchdog,
            idle_status: format!("Listening for \"{}\"", word.name()),
        })
    }

    fn status(&self) -> &str {
        &self.idle_status
    }

    /// Stops the voice loop, then the skills and the link, each waiting for its own
    /// parts (every wait is bounded where it is: the link's goodbye at
    /// 1.5 s, `GOODBYE_LIMIT` in `mqtt/link.rs`; the microphone's thread at 2 s,
    /// `CLOSE_LIMIT` in `audio/capture.rs`, even when its device does not answer).
    async fn shutdown(self) {
        self.voice.shutdown().await;
        if let Some(watchdog) = self.watchdog {
            let _ = watchdog.await;
        }
        self.spoke.shutdown().await;
    }
}

/// Feeds the systemd watchdog while both loops beat; stops (so systemd restarts the
/// service) when one is stuck for longer than the watchdog interval. Ends with `stop`.
fn watchdog(
    notifier: Arc<Notifier>,
    voice: &Voice,
    stop: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    let interval = notifier.watchdog()?;
    let (audio, turn) = (voice.audio_beat.clone(), voice.turn_beat.clone());
    // The loops beat every 0.1-0.5 s; a short watchdog interval must not make their
    // normal rhythm look like a hang.
    let limit = (interval / 2).max(Duration::from_secs(2));
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval / 3);
        let mut warned = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => return,
            }
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
    supervise::<Running>(config_path, config, ()).await
}

/// What the daemon keeps running between two signals: started from one
/// configuration, under one branch of the cancellation tree.
trait Service: Sized {
    /// What starting needs besides the configuration.
    type With;

    /// Starts everything from `parts`; all of it stops when `stop` is cancelled.
    async fn start(
        parts: &Parts,
        with: &Self::With,
        notifier: &Arc<Notifier>,
        stop: CancellationToken,
    ) -> Result<Self, PartError>;

    /// The status line while it runs.
    fn status(&self) -> &str;

    /// Waits for everything it started to stop (its branch is already cancelled).
    async fn shutdown(self);
}

/// Runs `S` until SIGTERM or SIGINT; on SIGHUP reads the configuration again and
/// restarts with it, going back to the one before if the new one does not start.
/// The root of the cancellation tree: each configuration runs under a child of it.
async fn supervise<S: Service>(
    config_path: Option<PathBuf>,
    config: Config,
    with: S::With,
) -> Result<(), DaemonError> {
    let mut signals = Signals::install().map_err(DaemonError::Signals)?;
    let notifier = Arc::new(Notifier::from_env());
    let root = CancellationToken::new();
    let mut config = config;
    // The configuration that ran before a reload, to go back to if the new one fails.
    let mut fallback: Option<Config> = None;
    // The parts that ran last, whose embedding model a reload may keep.
    let mut previous: Option<Parts> = None;
    loop {
        let stop = root.child_token();
        let started = match Parts::after(&config, previous.as_ref()) {
            Ok(parts) => S::start(&parts, &with, &notifier, stop.clone())
                .await
                .map(|running| (running, parts)),
            Err(error) => Err(error),
        };
        let running = match started {
            Ok((running, parts)) => {
                previous = Some(parts);
                running
            }
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
                    return Err(error.into());
                }
            },
        };
        notifier.ready(running.status());
        tracing::info!(device = %config.device.name, systemd = notifier.active(), "ready: {}", running.status());
        let next = loop {
            match signals.next().await {
                Signal::Stop(name) => {
                    tracing::info!("{name}: shutting down");
                    break None;
                }
                Signal::Reload => {
                    notifier.reloading();
                    match reload(config_path.as_deref()) {
                        Ok(new) => break Some(new),
                        Err(error) => {
                            tracing::error!(
                                "configuration not reloaded, the running one stays: {error}"
                            );
                            notifier.ready(running.status());
                        }
                    }
                }
            }
        };
        match next {
            None => notifier.stopping(),
            Some(_) => tracing::info!("SIGHUP: restarting with the reloaded configuration"),
        }
        stop.cancel();
        running.shutdown().await;
        match next {
            None => {
                tracing::info!("stopped");
                return Ok(());
            }
            Some(new) => {
                fallback = Some(std::mem::replace(&mut config, new));
            }
        }
    }
}

fn reload(path: Option<&std::path::Path>) -> Result<Config, ConfigError> {
    Config::load(path, std::env::vars())
}
