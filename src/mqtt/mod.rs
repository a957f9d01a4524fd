//! The link to the hub's MQTT broker: presence, skill registration, and skill calls
//! between spokes (docs/architecture.md, "MQTT between spokes").
//!
//! One task owns the connection ([`Link`]) and everything that changes with it: the
//! calls waiting for answers, the peer registry, what this spoke published. Everything
//! else talks to it over channels (calls in, answers back on a channel per call) and
//! reads immutable snapshots of the peers. Why it is built this way:
//! - the broker may restart at any time and rumqttc does not restore subscriptions, so
//!   every ConnAck re-subscribes and republishes status and registration;
//! - a call must always end: answered, refused at once (offline, not connected), or
//!   failed after the configured timeout; a lost connection fails the calls in flight;
//! - whatever arrives on the call topic is untrusted: size-limited, parsed strictly,
//!   checked against the allow-list, run off the connection task under a concurrency
//!   limit, and answered with an error when anything is wrong.
//! - whatever any broker client publishes is untrusted: registrations are bounded and
//!   names unique ([`peers`]), answers count only with the random correlation data of a
//!   call in flight, our own retained topics are put right when someone else writes
//!   them, and text from the network loses its control characters.

mod link;
pub mod peers;
pub mod protocol;
mod server;
pub mod settings;

pub use link::{Link, Role};
pub use settings::{Broker, LinkSettings, PeerLimits};

/// Why the MQTT link could not start.
#[derive(Debug, thiserror::Error)]
pub enum MqttError {
    /// `mqtt.broker` is not a usable URL.
    #[error("mqtt.broker `{url}`: {problem}; expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT]")]
    BrokerUrl {
        /// The configured URL.
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A broker off this machine without TLS and authentication, not explicitly allowed.
    #[error(
        "refusing to connect to {host} without {missing}: skill calls and registrations would cross the network unprotected. Use mqtts:// with a username/password or client certificate, or set mqtt.allow_insecure = true to accept the risk"
    )]
    Insecure {
        /// The broker host.
        host: String,
        /// `TLS`, `authentication` or both.
        missing: String,
    },
    /// A file the configuration names could not be read or parsed.
    #[error("{what} {path}: {problem}")]
    File {
        /// What the file is for (`mqtt.ca_file`...).
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        problem: String,
    },
    /// The TLS settings are inconsistent or rejected by rustls.
    #[error("TLS setup: {0}")]
    Tls(String),
    /// The device id could not be created or is not usable in topics.
    #[error("device id: {0}")]
    DeviceId(String),
}
