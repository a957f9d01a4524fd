//! What the link needs (broker address, identity, credentials, TLS) and the checks
//! that must pass before anything is sent; `config/settings.rs` makes the settings
//! from `[mqtt]` with these functions.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::skills::policy::AllowList;

use super::MqttError;
use super::protocol::Topics;

/// Where the broker is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// `mqtts://`.
    pub tls: bool,
}

impl Broker {
    /// Parses `mqtt://HOST[:PORT]` / `mqtts://HOST[:PORT]` (also `tcp://`, `ssl://`).
    pub fn parse(url: &str) -> Result<Broker, MqttError> {
        let bad = |problem: &str| MqttError::BrokerUrl {
            url: url.to_string(),
            problem: problem.to_string(),
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let tls = match scheme {
            "mqtt" | "tcp" => false,
            "mqtts" | "ssl" => true,
            _ => return Err(bad("unknown scheme")),
        };
        let rest = rest.trim_end_matches('/');
        if rest.contains('/') || rest.contains('@') {
            return Err(bad(
                "no path or user info allowed (credentials go in mqtt.username)",
            ));
        }
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed `[`"))?;
            (host.to_string(), after.strip_prefix(':'))
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (rest.to_string(), None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            Some(p) => p.parse().map_err(|_| bad("the port is not a number"))?,
            None if tls => 8883,
            None => 1883,
        };
        Ok(Broker { host, port, tls })
    }

    /// Whether the broker is on this machine.
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

/// Everything the link needs to run.
#[derive(Clone)]
pub struct LinkSettings {
    /// The broker.
    pub broker: Broker,
    /// This device's id in topics.
    pub device_id: String,
    /// This device's display name.
    pub device_name: String,
    /// Username and password, when configured.
    pub credentials: Option<(String, String)>,
    /// The TLS client configuration for `mqtts://`.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Keep-alive interval.
    pub keep_alive: Duration,
    /// The topics.
    pub topics: Topics,
    /// How long an outgoing call may take.
    pub call_timeout: Duration,
    /// What other devices may call here.
    pub allow: AllowList,
    /// Largest call payload.
    pub max_payload: usize,
    /// Incoming calls at once.
    pub max_concurrent: usize,
    /// What other spokes' registrations may hold.
    pub peer_limits: PeerLimits,
    /// What other spokes' skills are indexed with for search by meaning.
    pub search: crate::embed::SearchModel,
}

/// Bounds on what other spokes may register (`mqtt.max_registration_bytes` and the
/// keys beside it): a registration past one is refused whole, so one peer cannot make
/// this spoke hold or search unbounded text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerLimits {
    /// Largest registration payload.
    pub registration_bytes: usize,
    /// Other spokes kept track of.
    pub peers: usize,
    /// Classes per registration.
    pub classes: usize,
    /// Functions per registration.
    pub functions: usize,
    /// `@request` lines per registration.
    pub requests: usize,
    /// Longest name (device, class, function, parameter, type).
    pub name_bytes: usize,
    /// Longest summary, signature, parameter description or example request.
    pub summary_bytes: usize,
    /// Longest description, docstring or example code.
    pub text_bytes: usize,
}

impl Default for PeerLimits {
    fn default() -> Self {
        PeerLimits {
            registration_bytes: 256 * 1024,
            peers: 64,
            classes: 64,
            functions: 256,
            requests: 1024,
            name_bytes: 128,
            summary_bytes: 1024,
            text_bytes: 8 * 1024,
        }
    }
}

impl std::fmt::Debug for LinkSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No credentials in logs.
        f.debug_struct("LinkSettings")
            .field("broker", &self.broker)
            .field("device_id", &self.device_id)
            .field("device_name", &self.device_name)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// The password: the first line of `file` when one is named, else `inline`.
pub fn password(inline: &str, file: &Path) -> Result<String, MqttError> {
    if file.as_os_str().is_empty() {
        return Ok(inline.to_string());
    }
    let text = read("mqtt.password_file", file)?;
    let text = String::from_utf8(text).map_err(|_| MqttError::File {
        what: "mqtt.password_file",
        path: file.to_path_buf(),
        problem: "not UTF-8 text".into(),
    })?;
    Ok(text.lines().next().unwrap_or_default().to_string())
}

/// Refuses a broker on another machine without TLS and authentication (a password or
/// a client certificate), unless `allow_insecure`; then it only warns.
pub fn check_security(
    broker: &Broker,
    authenticated: bool,
    allow_insecure: bool,
) -> Result<(), MqttError> {
    if broker.is_loopback() || (broker.tls && authenticated) {
        return Ok(());
    }
    let missing = match (broker.tls, authenticated) {
        (false, false) => "TLS and authentication",
        (false, true) => "TLS",
        _ => "authentication",
    };
    if !allow_insecure {
        return Err(MqttError::Insecure {
            host: broker.host.clone(),
            missing: missing.into(),
        });
    }
    tracing::warn!(
        broker = %broker.host,
        missing,
        "connecting without {missing} because mqtt.allow_insecure is set"
    );
    Ok(())
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, MqttError> {
    std::fs::read(path).map_err(|e| MqttError::File {
        what,
        path: path.to_path_buf(),
        problem: e.to_string(),
    })
}

/// The TLS client configuration: the system roots (or `ca_file`), and a client
/// certificate when one is named.
pub fn tls_config(
    ca_file: &Path,
    client_cert: &Path,
    client_key: &Path,
) -> Result<rustls::ClientConfig, MqttError> {
    let mut roots = rustls::RootCertStore::empty();
    if ca_file.as_os_str().is_empty() {
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        if roots.is_empty() {
            return Err(MqttError::Tls(
                "no system CA certificates found; install ca-certificates or set mqtt.ca_file"
                    .into(),
            ));
        }
    } else {
        let pem = read("mqtt.ca_file", ca_file)?;
        let certs = rustls_pemfile::certs(&mut pem.as_slice())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem_error("mqtt.ca_file", ca_file, e))?;
        roots.add_parsable_certificates(certs);
        if roots.is_empty() {
            return Err(MqttError::File {
                what: "mqtt.ca_file",
                path: ca_file.to_path_buf(),
                problem: "no usable PEM certificate in it".into(),
            });
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| MqttError::Tls(e.to_string()))?
        .with_root_certificates(roots);
    match (
        client_cert.as_os_str().is_empty(),
        client_key.as_os_str().is_empty(),
    ) {
        (true, true) => Ok(builder.with_no_client_auth()),
        (false, false) => {
            let pem = read("mqtt.client_cert", client_cert)?;
            let chain = rustls_pemfile::certs(&mut pem.as_slice())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| pem_error("mqtt.client_cert", client_cert, e))?;
            let pem = read("mqtt.client_key", client_key)?;
            let key = rustls_pemfile::private_key(&mut pem.as_slice())
                .map_err(|e| pem_error("mqtt.client_key", client_key, e))?
                .ok_or_else(|| MqttError::File {
                    what: "mqtt.client_key",
                    path: client_key.to_path_buf(),
                    problem: "no private key in it".into(),
                })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| {
                    let hint = if format!("{e:?}").contains("UnsupportedCertVersion") {
                        " (an X.509 version 1 certificate: issue it as version 3, e.g. `openssl x509 -req ... -extfile` with `extendedKeyUsage=clientAuth`)"
                    } else {
                        ""
                    };
                    MqttError::Tls(format!(
                        "client certificate {} does not fit mqtt.client_key or cannot be used: {e}{hint}",
                        client_cert.display()
                    ))
                })
        }
        _ => Err(MqttError::Tls(
            "set both mqtt.client_cert and mqtt.client_key, or neither".into(),
        )),
    }
}

fn pem_error(what: &'static str, path: &Path, e: std::io::Error) -> MqttError {
    MqttError::File {
        what,
        path: path.to_path_buf(),
        problem: format!("not valid PEM: {e}"),
    }
}

/// The configured id, or the one kept in `data_dir/device-id`, created on first use.
/// This device's id: `configured`, or the one kept in `data_dir` (created on first use).
pub fn device_id(configured: &str, data_dir: &Path) -> Result<String, MqttError> {
    let valid = super::protocol::valid_device_id;
    if !configured.is_empty() {
        if !valid(configured) {
            return Err(MqttError::DeviceId(format!(
                "mqtt.device_id `{configured}` may only use a-z, 0-9 and `-` (at most 64)"
            )));
        }
        return Ok(configured.to_string());
    }
    let path: PathBuf = data_dir.join("device-id");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let id = text.trim();
        if valid(id) {
            return Ok(id.to_string());
        }
        return Err(MqttError::DeviceId(format!(
            "{} does not hold a valid id (a-z, 0-9, `-`); delete it to create a new one",
            path.display()
        )));
    }
    let uuid = std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map_err(|e| MqttError::DeviceId(format!("cannot create a random id: {e}")))?;
    let id: String = uuid.trim().chars().filter(|c| *c != '-').take(16).collect();
    std::fs::create_dir_all(data_dir)
        .and_then(|()| std::fs::write(&path, format!("{id}\n")))
        .map_err(|e| {
            MqttError::DeviceId(format!(
                "cannot keep the new id in {}: {e}; set mqtt.device_id or device.data_dir",
                path.display()
            ))
        })?;
    tracing::info!(device_id = %id, file = %path.display(), "created this device's id");
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_urls() {
        let b = Broker::parse("mqtts://hub.local").unwrap();
        assert_eq!((b.host.as_str(), b.port, b.tls), ("hub.local", 8883, true));
        let b = Broker::parse("mqtt://127.0.0.1:1999").unwrap();
        assert!(b.is_loopback() && b.port == 1999 && !b.tls);
        assert!(Broker::parse("[::1]").is_err());
        assert!(Broker::parse("mqtt://[::1]:1883").unwrap().is_loopback());
        assert!(Broker::parse("http://hub").is_err());
        assert!(Broker::parse("mqtt://user:pw@hub").is_err());
    }

    #[test]
    fn insecure_remote_broker_is_refused_unless_allowed() {
        let remote = Broker::parse("mqtt://hub.example").unwrap();
        let err = check_security(&remote, false, false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("allow_insecure") && err.contains("TLS"),
            "{err}"
        );
        assert!(check_security(&remote, false, true).is_ok());
        let local = Broker::parse("mqtt://127.0.0.1").unwrap();
        assert!(check_security(&local, false, false).is_ok());
        let secured = Broker::parse("mqtts://hub.example").unwrap();
        assert!(check_security(&secured, true, false).is_ok());
        let err = check_security(&secured, false, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("authentication"), "{err}");
    }

    #[test]
    fn device_id_is_created_once() {
        let dir = tempfile::tempdir().unwrap();
        let first = device_id("", dir.path()).unwrap();
        assert_eq!(first.len(), 16);
        assert_eq!(device_id("", dir.path()).unwrap(), first);
        assert!(device_id("Bad Id", dir.path()).is_err());
    }
}
