//! Talking to systemd without linking libsystemd: the `sd_notify` protocol is one
//! datagram per message to the socket named in `NOTIFY_SOCKET` (a path, or `@name` in
//! the abstract namespace). Without that variable (run by hand, under another
//! supervisor) every call is a no-op, so the daemon works the same without systemd.
//!
//! The watchdog is fed only while both the audio loop and the conversation loop
//! report progress ([`Heartbeat`]): a stuck stage stops the keep-alives and systemd
//! restarts the service, which is the only cure for a wedged driver or library call.

use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A connection to systemd's notification socket, or nothing.
#[derive(Debug)]
pub struct Notifier {
    socket: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// From `NOTIFY_SOCKET` and `WATCHDOG_USEC`/`WATCHDOG_PID` in the environment.
    pub fn from_env() -> Notifier {
        let socket = std::env::var_os("NOTIFY_SOCKET").and_then(|path| {
            let addr = socket_addr(path.as_encoded_bytes())?;
            let socket = UnixDatagram::unbound().ok()?;
            // Never wait on systemd: a full socket queue drops a status line rather
            // than stalling the thread that reports it.
            socket.set_nonblocking(true).ok()?;
            Some((socket, addr))
        });
        let for_us = std::env::var("WATCHDOG_PID")
            .map(|pid| pid.trim() == std::process::id().to_string())
            .unwrap_or(true);
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|usec| usec.trim().parse::<u64>().ok())
            .filter(|&usec| usec > 0 && for_us)
            .map(Duration::from_micros);
        Notifier { socket, watchdog }
    }

    /// Whether systemd is listening.
    pub fn active(&self) -> bool {
        self.socket.is_some()
    }

    /// The watchdog interval systemd asked for, if any.
    pub fn watchdog(&self) -> Option<Duration> {
        self.watchdog
    }

    fn send(&self, message: &str) {
        if let Some((socket, addr)) = &self.socket
            && let Err(error) = socket.send_to_addr(message.as_bytes(), addr)
        {
            tracing::debug!("cannot notify systemd ({message:?}): {error}");
        }
    }

    /// Start-up is done.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// What the daemon is doing, for `systemctl status`.
    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={}", one_line(status)));
    }

    /// The configuration is being reloaded; `ready` follows.
    pub fn reloading(&self) {
        self.send(&format!(
            "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=Reloading the configuration",
            monotonic_usec()
        ));
    }

    /// Shutting down.
    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=Shutting down");
    }

    /// One watchdog keep-alive.
    pub fn keep_alive(&self) {
        self.send("WATCHDOG=1");
    }
}

fn socket_addr(path: &[u8]) -> Option<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    match path.split_first() {
        Some((b'@', name)) => std::os::unix::net::SocketAddr::from_abstract_name(name).ok(),
        Some((b'/', _)) => {
            use std::os::unix::ffi::OsStrExt;
            std::os::unix::net::SocketAddr::from_pathname(std::ffi::OsStr::from_bytes(path)).ok()
        }
        _ => None,
    }
}

fn one_line(text: &str) -> String {
    text.replace('\n', " ")
}

/// `CLOCK_MONOTONIC` in microseconds, which systemd wants with `RELOADING=1`.
fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000
        + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000
}

/// The last time a loop made progress, shared between the loop and the watchdog.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    origin: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Heartbeat {
    /// A heartbeat that has just beaten.
    pub fn new() -> Heartbeat {
        Heartbeat {
            origin: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The loop is alive.
    pub fn beat(&self) {
        let now = self.origin.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    /// How long since the last beat.
    pub fn age(&self) -> Duration {
        let now = self.origin.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

impl Default for Heartbeat {
    fn default() -> Self {
        Heartbeat::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_a_notify_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        let notifier = Notifier {
            socket: Some((
                UnixDatagram::unbound().unwrap(),
                socket_addr(path.as_os_str().as_encoded_bytes()).unwrap(),
            )),
            watchdog: None,
        };
        notifier.ready("Listening\nfor the wake word");
        notifier.keep_alive();
        let mut buf = [0u8; 256];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=Listening for the wake word");
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"WATCHDOG=1");
    }

    #[test]
    fn relative_or_empty_socket_names_are_ignored() {
        assert!(socket_addr(b"").is_none());
        assert!(socket_addr(b"relative/path").is_none());
        assert!(socket_addr(b"@abstract").is_some());
    }

    #[test]
    fn a_heartbeat_ages_until_it_beats() {
        let beat = Heartbeat::new();
        std::thread::sleep(Duration::from_millis(30));
        assert!(beat.age() >= Duration::from_millis(30));
        beat.beat();
        assert!(beat.age() < Duration::from_millis(30));
    }
}
