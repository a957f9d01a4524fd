//! The long-running spoke without audio: skills with hot reload and the MQTT link.
//!
//! `serve` is this alone (a TV box or media server that hosts skills but has no
//! microphone); `run` builds on the same parts. It owns the tasks and ends them in
//! order on SIGTERM or SIGINT: hot reload stops, `offline` is published, the connection
//! closes.

use std::sync::Arc;

use tokio::sync::watch;

use crate::config::Config;
use crate::device::Confirm;
use crate::mqtt::{Link, LinkSettings, MqttError, Role};
use crate::skills::watch::{LiveRegistry, Watcher};

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The MQTT settings are unusable.
    #[error(transparent)]
    Mqtt(#[from] MqttError),
    /// Signal handlers could not be installed.
    #[error("cannot listen for SIGTERM/SIGINT: {0}")]
    Signals(std::io::Error),
}

/// The running parts of a spoke.
pub struct Spoke {
    /// The skills in service, kept current by hot reload.
    pub skills: Arc<LiveRegistry>,
    /// The MQTT link, unless in local mode.
    pub link: Option<Link>,
    stop: watch::Sender<bool>,
    watcher: tokio::task::JoinHandle<()>,
}

impl Spoke {
    /// Loads the skills, starts hot reload and (when a broker is configured) the MQTT
    /// link, on the current tokio runtime. `confirm` asks the local user before
    /// `@confirm` functions run for other devices.
    pub fn start(config: &Config, confirm: Arc<dyn Confirm>) -> Result<Spoke, DaemonError> {
        let settings = LinkSettings::from_config(config)?;
        let (watcher, errors) = Watcher::start(&config.skills.dir, &config.host_settings());
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
        let (stop, stop_rx) = watch::channel(false);
        let republish = link.clone();
        let watcher = tokio::spawn(watcher.run(stop_rx, move || {
            if let Some(link) = &republish {
                link.republish();
            }
        }));
        Ok(Spoke {
            skills,
            link,
            stop,
            watcher,
        })
    }

    /// Stops hot reload and closes the link cleanly.
    pub async fn shutdown(self) {
        self.stop.send_replace(true);
        let _ = self.watcher.await;
        if let Some(link) = &self.link {
            link.shutdown().await;
        }
    }
}

/// `strawberry-spoke serve`: runs until SIGTERM or SIGINT, then shuts down cleanly.
pub async fn serve(config: &Config, confirm: Arc<dyn Confirm>) -> Result<(), DaemonError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signals)?;
    let spoke = Spoke::start(config, confirm)?;
    tracing::info!(device = %config.device.name, "serving");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    spoke.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}
