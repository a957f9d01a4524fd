//! The daemon's one signal loop: SIGTERM and SIGINT stop it, SIGHUP reloads its
//! configuration. `serve` and `run` both wait here, so they stop and reload alike.

use tokio::signal::unix::{Signal as Stream, SignalKind, signal};

/// What a signal asks of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Signal {
    /// Stop (the signal's name, for the log).
    Stop(&'static str),
    /// Read the configuration again and restart with it.
    Reload,
}

/// The signals the daemon handles, installed once for its whole life.
pub(super) struct Signals {
    term: Stream,
    int: Stream,
    hup: Stream,
}

impl Signals {
    /// Installs the handlers (from then on these signals no longer end the process).
    pub(super) fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal.
    pub(super) async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::Stop("SIGTERM"),
            _ = self.int.recv() => Signal::Stop("SIGINT"),
            _ = self.hup.recv() => Signal::Reload,
        }
    }
}
