//! A real mosquitto broker on a free loopback port, and `mosquitto_sub`/`mosquitto_pub`
//! for the outside view. Shared by the MQTT tests and the round-trip benchmark.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::poll;

/// Numbers the subscribers [`Broker::request`] starts, for their client ids.
static SUBSCRIBERS: AtomicUsize = AtomicUsize::new(0);

/// A running mosquitto, killed when dropped.
pub struct Broker {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its folder: config, log, certificates, password file.
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    conf: PathBuf,
}

/// Extra broker settings for a test.
#[derive(Default)]
pub struct Options {
    /// `(user, password)`: anonymous access off, this one user allowed.
    pub user: Option<(String, String)>,
    /// Serve TLS with certificates generated into the broker's folder.
    pub tls: bool,
    /// With `tls`: refuse clients without a certificate signed by the test CA
    /// (`client.pem`/`client.key` in the broker's folder are one).
    pub client_certs: bool,
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}

impl Broker {
    /// An anonymous broker without TLS.
    pub fn start() -> Broker {
        Broker::start_with(Options::default())
    }

    /// A broker with `options`.
    pub fn start_with(options: Options) -> Broker {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let mut conf = format!(
            "# Started as root, mosquitto would drop to user `mosquitto`, which cannot read this folder.\n\
             user root\n\
             persistence false\n\
             log_dest file {log}\n\
             log_type all\n\
             set_tcp_nodelay true\n\
             listener {port} 127.0.0.1\n",
            log = dir.path().join("mosquitto.log").display()
        );
        match &options.user {
            Some((user, password)) => {
                let file = dir.path().join("passwords");
                let status = Command::new("mosquitto_passwd")
                    .args(["-b", "-c"])
                    .arg(&file)
                    .args([user, password])
                    .status()
                    .expect("mosquitto_passwd (package mosquitto) must be installed");
                assert!(status.success(), "mosquitto_passwd failed");
                conf.push_str(&format!(
                    "allow_anonymous false\npassword_file {}\n",
                    file.display()
                ));
            }
            None => conf.push_str("allow_anonymous true\n"),
        }
        if options.tls {
            make_certificates(dir.path());
            conf.push_str(&format!(
                "cafile {d}/ca.pem\ncertfile {d}/server.pem\nkeyfile {d}/server.key\n",
                d = dir.path().display()
            ));
            if options.client_certs {
                conf.push_str("require_certificate true\n");
            }
        }
        let conf_path = dir.path().join("mosquitto.conf");
        std::fs::write(&conf_path, conf).expect("write mosquitto.conf");
        let mut broker = Broker {
            port,
            dir,
            child: None,
            conf: conf_path,
        };
        broker.launch();
        broker
    }

    fn launch(&mut self) {
        let child = Command::new("mosquitto")
            .arg("-c")
            .arg(&self.conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mosquitto (package mosquitto) must be installed");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "mosquitto did not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9` the broker.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// `mqtt://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// The broker's log so far (for assertion messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("mosquitto.log")).unwrap_or_default()
    }

    /// The CA certificate of a TLS broker.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Common `mosquitto_sub`/`mosquitto_pub` arguments: host, port, protocol v5.
    pub fn client_args(&self) -> Vec<String> {
        vec![
            "-h".into(),
            "127.0.0.1".into(),
            "-p".into(),
            self.port.to_string(),
            "-V".into(),
            "mqttv5".into(),
        ]
    }

    /// The retained message on `topic`, if any (waits at most 1 s).
    pub fn retained(&self, topic: &str, extra: &[&str]) -> Option<String> {
        let out = Command::new("mosquitto_sub")
            .args(self.client_args())
            .args(extra)
            .args(["-t", topic, "-C", "1", "-W", "1", "--retained-only"])
            .output()
            .expect("mosquitto_sub (package mosquitto-clients) must be installed");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim_end().to_string())
    }

    /// Waits until the retained message on `topic` satisfies `ok`; returns it.
    pub fn wait_retained(
        &self,
        topic: &str,
        timeout: Duration,
        ok: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.retained(topic, &[]);
            if let Some(text) = &seen
                && ok(text)
            {
                return text.clone();
            }
            assert!(
                Instant::now() < deadline,
                "retained {topic} never became as expected; last seen {seen:?}\nbroker log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Publishes `payload` on `topic` with `extra` arguments (e.g. `-D publish
    /// response-topic X`) and waits for one message on `reply` (at most 5 s).
    pub fn request(
        &self,
        topic: &str,
        payload: &[u8],
        reply: &str,
        extra: &[&str],
    ) -> Option<String> {
        // Fixed width, so that no id is a prefix of another in the broker's log.
        let id = format!("request-{:06}", SUBSCRIBERS.fetch_add(1, Ordering::Relaxed));
        let sub = Command::new("mosquitto_sub")
            .args(self.client_args())
            .args(["-i", &id, "-t", reply, "-C", "1", "-W", "5"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("mosquitto_sub");
        // mosquitto_sub says nothing once subscribed, but the broker logs its SUBACK; a
        // reply published before that would be lost (as seen on a loaded machine).
        let subscribed = format!("Sending SUBACK to {id}");
        poll::wait_until(
            &format!("mosquitto_sub {id} subscribed to {reply}"),
            Duration::from_secs(5),
            || self.log().contains(&subscribed),
        );
        let payload_file = self.dir.path().join("payload.bin");
        std::fs::write(&payload_file, payload).expect("write payload");
        let status = Command::new("mosquitto_pub")
            .args(self.client_args())
            .args(["-t", topic, "-f"])
            .arg(&payload_file)
            .args(["-D", "publish", "response-topic", reply])
            .args(extra)
            .status()
            .expect("mosquitto_pub");
        assert!(status.success(), "mosquitto_pub failed");
        let out: Output = sub.wait_with_output().expect("mosquitto_sub output");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim_end().to_string())
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A CA and a server certificate for `localhost`/127.0.0.1, made with openssl.
fn make_certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl must be installed");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .expect("write ext.cnf");
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "server.pem",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=test spoke",
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
    ]);
    // Version 3 with extensions: rustls refuses version 1 certificates.
    std::fs::write(
        dir.join("client.cnf"),
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
    .expect("write client.cnf");
    run(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-days",
        "2",
        "-extfile",
        "client.cnf",
        "-out",
        "client.pem",
    ]);
}
