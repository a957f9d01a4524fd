//! A `run` daemon under test: its files (config, skills, data), a FIFO microphone and a
//! file speaker, systemd notifications on a socket, and the log. For voice tests that
//! run the real binary with real tiny.en weights, real espeak-ng and the scripted hub.

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::mouth;
use super::poll;
use super::stt::{cache_dir, ggml_model};

/// A spoke's folder: `config.toml`, `skills/`, `data/`, `home/.asoundrc`, the FIFO and
/// the speaker file.
pub struct Spoke {
    pub dir: tempfile::TempDir,
}

impl Spoke {
    /// A spoke called "Test Box" talking to `hub_url`, with the bundled skills plus
    /// `skills` (file name, text), and `extra` appended to the config.
    pub fn new(hub_url: &str, skills: &[(&str, &str)], extra: &str) -> Spoke {
        Spoke::named("Test Box", hub_url, skills, extra)
    }

    /// [`Spoke::new`] with another device name.
    pub fn named(name: &str, hub_url: &str, skills: &[(&str, &str)], extra: &str) -> Spoke {
        let dir = tempfile::tempdir().unwrap();
        let skill_dir = dir.path().join("skills");
        std::fs::create_dir(&skill_dir).unwrap();
        std::fs::create_dir(dir.path().join("home")).unwrap();
        let bundled = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("skills");
        for entry in std::fs::read_dir(bundled).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rhai") {
                std::fs::copy(&path, skill_dir.join(path.file_name().unwrap())).unwrap();
            }
        }
        for (name, text) in skills {
            std::fs::write(skill_dir.join(name), text).unwrap();
        }
        let config = format!(
            r#"[device]
name = "{name}"
data_dir = "{data}"

[skills]
dir = "{skills}"

[stt]
model = "{model}"
threads = 2
# A busy test machine can be many times slower than a board: the time limit is not
# what these tests are about (tests/stt.rs tests it).
timeout_ms = 600000

[[hub.endpoints]]
url = "{hub_url}"
model = "test"

[audio]
input = "spoke_test_mic"
input_rate = 16000
input_channels = 1
input_format = "i16"
output = "spoke_test_speaker"

{extra}
"#,
            data = dir.path().join("data").display(),
            skills = skill_dir.display(),
            model = ggml_model("q8_0").display(),
        );
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        let spoke = Spoke { dir };
        mouth::make_fifo(&spoke.path("mic.fifo"));
        let rc = mouth::asoundrc(
            "spoke_test_mic",
            &spoke.path("mic.fifo"),
            "spoke_test_speaker",
            &spoke.path("speaker.out"),
        );
        std::fs::write(spoke.path("home/.asoundrc"), rc).unwrap();
        spoke
    }

    /// Points the spoke's speaker at a FIFO for [`LiveRoom`](super::live_room::LiveRoom)
    /// instead of a file; its path.
    pub fn speaker_in_room(&self) -> PathBuf {
        let fifo = self.path("speaker.fifo");
        mouth::make_fifo(&fifo);
        let rc = mouth::asoundrc(
            "spoke_test_mic",
            &self.path("mic.fifo"),
            "spoke_test_speaker",
            &fifo,
        );
        std::fs::write(self.path("home/.asoundrc"), rc).unwrap();
        fifo
    }

    /// Makes the spoke use another speech-to-text model.
    pub fn use_model(&self, model: &std::path::Path) {
        let config = std::fs::read_to_string(self.path("config.toml")).unwrap();
        let tiny = format!("model = \"{}\"", ggml_model("q8_0").display());
        assert!(config.contains(&tiny));
        let config = config.replace(&tiny, &format!("model = \"{}\"", model.display()));
        std::fs::write(self.path("config.toml"), config).unwrap();
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The binary with this spoke's config and home.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_strawberry-spoke"));
        cmd.arg("--config")
            .arg(self.path("config.toml"))
            .args(args)
            .env("HOME", self.path("home"))
            .env("RUST_LOG", "info,whisper_rs=warn")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .stdin(Stdio::null());
        cmd
    }

    /// Starts `run`, its notifications going to `notify`, its log to `daemon.log`
    /// (appended, so a restarted daemon's log follows the first one's).
    pub fn run(&self, notify: &NotifySocket) -> Daemon {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("daemon.log"))
            .unwrap();
        Daemon(
            self.command(&["run"])
                .env("NOTIFY_SOCKET", &notify.path)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        )
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path("daemon.log")).unwrap_or_default()
    }

    /// How many bytes have been played.
    pub fn played(&self) -> u64 {
        std::fs::metadata(self.path("speaker.out")).map_or(0, |m| m.len())
    }

    /// Whether anything but silence was played after the first `offset` bytes: an output
    /// the spoke keeps open between sounds goes on writing silence, which no one hears.
    pub fn sounded_since(&self, offset: u64) -> bool {
        let played = std::fs::read(self.path("speaker.out")).unwrap_or_default();
        let offset = usize::try_from(offset).unwrap_or(usize::MAX);
        played
            .get(offset..)
            .is_some_and(|new| new.iter().any(|&b| b != 0))
    }

    /// Speaks `text` with espeak-ng; the 16 kHz samples.
    pub fn espeak(&self, text: &str) -> Vec<f32> {
        let wav = self.path("said.wav");
        let status = Command::new("espeak-ng")
            .args(["-v", "en-us", "-w"])
            .arg(&wav)
            .arg(text)
            .status()
            .expect("espeak-ng");
        assert!(status.success());
        strawberry_spoke::audio::wav::read_wav_16k(&wav).unwrap().0
    }
}

/// `tests/setup.sh`'s "hey strawberry, what is the weather like tomorrow" in `voice`.
pub fn wake_phrase(voice: &str) -> Vec<f32> {
    let path = mouth::wake_phrase(&cache_dir(), voice);
    strawberry_spoke::audio::wav::read_wav_16k(&path).unwrap().0
}

/// The daemon, killed when dropped.
pub struct Daemon(pub Child);

impl Daemon {
    /// SIGTERM, and waits for the exit.
    pub fn stop(mut self) {
        // SAFETY: kill only sends a signal to our own child.
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM);
        }
        let _ = self.0.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Collects systemd notifications sent to a socket, on a thread of its own so the
/// daemon's queue never fills while the test looks elsewhere.
pub struct NotifySocket {
    pub path: PathBuf,
    seen: Arc<Mutex<Vec<(SystemTime, String)>>>,
}

impl NotifySocket {
    pub fn bind(spoke: &Spoke) -> NotifySocket {
        let path = spoke.path("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends when the test's temporary directory (and the socket) goes away.
            while let Ok(n) = socket.recv(&mut buf) {
                let at = SystemTime::now();
                let message = String::from_utf8_lossy(&buf[..n]).into_owned();
                let mut sink = sink.lock().unwrap();
                for line in message.lines() {
                    sink.push((at, line.to_string()));
                }
            }
        });
        NotifySocket { path, seen }
    }

    /// The `STATUS=` lines so far, in order, with when each arrived.
    pub fn statuses(&self) -> Vec<(SystemTime, String)> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(at, l)| l.strip_prefix("STATUS=").map(|s| (*at, s.to_string())))
            .collect()
    }

    /// Waits until one of the statuses after the first `after` starts with `prefix`;
    /// its index and when it arrived. Fails with the statuses and the log.
    pub fn wait_status(
        &self,
        spoke: &Spoke,
        prefix: &str,
        after: usize,
        limit: Duration,
    ) -> (usize, SystemTime) {
        let until = Instant::now() + limit;
        poll::wait_for(&format!("status {prefix:?}"), limit * 2, || {
            let statuses = self.statuses();
            assert!(
                Instant::now() < until,
                "waited {limit:?} for a status {prefix:?}; statuses: {:?}\n{}",
                statuses.iter().map(|(_, s)| s).collect::<Vec<_>>(),
                spoke.log()
            );
            statuses
                .into_iter()
                .enumerate()
                .skip(after)
                .find(|(_, (_, s))| s.starts_with(prefix))
                .map(|(i, (at, _))| (i, at))
        })
    }
}
