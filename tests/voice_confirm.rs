//! Confirming by voice, end to end through the real binary: model code calls a
//! `@confirm` skill, the spoke asks aloud and listens for the answer without the wake
//! word. `run` goes through an ALSA microphone fed from a FIFO and a file speaker (as
//! `tests/voice.rs` does), `listen` through a recording whose next utterance is the
//! answer. Real espeak-ng, real tiny.en weights, the scripted hub.

#[path = "support/llm.rs"]
mod llm;
#[path = "support/mouth.rs"]
mod mouth;
#[path = "support/poll.rs"]
mod poll;
#[path = "support/stt.rs"]
mod stt_support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use llm::{Reply, ScriptedServer, text_reply};
use mouth::Mouth;
use stt_support::{cache_dir, ggml_model};

/// Whisper's worker threads spin-wait, so two sessions at once on a small machine slow
/// each other into missed timings (see `tests/voice.rs`): one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A generous bound on each step of a session (transcribing, the hub, speaking).
const STEP: Duration = Duration::from_secs(30);

/// A `@confirm` skill that leaves a trace in its storage journal when it runs.
const LOCK: &str = r#"//! The front door.
//!
//! @class LockSkill

/// Opens the front door.
///
/// @param minutes: int  How long it stays open.
/// @return int  How often it was opened.
/// @confirm
fn open(minutes) {
    let times = storage_get("opened", 0) + 1;
    storage_set("opened", times);
    times
}
"#;

const CALL: &str = "```rhai\ndevice.LockSkill.open(5)\n```";

/// A spoke's files: config with the devices of [`declare_devices`], the skill, data.
struct Spoke {
    dir: tempfile::TempDir,
}

impl Spoke {
    fn new(hub_url: &str) -> Spoke {
        let dir = tempfile::tempdir().unwrap();
        let skills = dir.path().join("skills");
        std::fs::create_dir(&skills).unwrap();
        std::fs::create_dir(dir.path().join("home")).unwrap();
        std::fs::write(skills.join("lock.rhai"), LOCK).unwrap();
        let config = format!(
            r#"[device]
name = "Test Box"
data_dir = "{data}"

[skills]
dir = "{skills}"

[stt]
model = "{model}"
threads = 2

[[hub.endpoints]]
url = "{hub_url}"
model = "test"

[vad]
confirm_ms = 3000

[audio]
input = "spoke_test_mic"
input_rate = 16000
input_channels = 1
input_format = "i16"
output = "spoke_test_speaker"
cues = false
"#,
            data = dir.path().join("data").display(),
            skills = skills.display(),
            model = ggml_model("q8_0").display(),
        );
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        Spoke { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
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

    /// How many times the skill ran: the lines of its storage journal.
    fn opened(&self) -> usize {
        std::fs::read_to_string(self.path("data/skills/LockSkill.jsonl"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("daemon.log")).unwrap_or_default()
    }
}

/// Speaks `text` with espeak-ng; the 16 kHz samples.
fn espeak(spoke: &Spoke, text: &str) -> Vec<f32> {
    let wav = spoke.path("said.wav");
    let status = Command::new("espeak-ng")
        .args(["-v", "en-us", "-w"])
        .arg(&wav)
        .arg(text)
        .status()
        .expect("espeak-ng");
    assert!(status.success());
    strawberry_spoke::audio::wav::read_wav_16k(&wav).unwrap().0
}

fn wake_phrase(voice: &str) -> Vec<f32> {
    let path = mouth::wake_phrase(&cache_dir(), voice);
    strawberry_spoke::audio::wav::read_wav_16k(&path).unwrap().0
}

/// The text of the last message of a request the hub received.
fn last_message(request: &serde_json::Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The daemon, killed when the test ends.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for `done` at most [`STEP`]; fails with the daemon's log.
async fn wait(spoke: &Spoke, what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + STEP;
    poll::wait_for_async(what, STEP * 2, || {
        assert!(
            Instant::now() < until,
            "waited {STEP:?} for {what}:\n{}",
            spoke.log()
        );
        done().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_asks_aloud_and_runs_only_after_a_spoken_yes() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let hub = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&[CALL])),
        Reply::Chunks(text_reply(&["The door is open."])),
        Reply::Chunks(text_reply(&[CALL])),
        Reply::Chunks(text_reply(&["Okay, it stays shut."])),
        Reply::Chunks(text_reply(&[CALL])),
        Reply::Chunks(text_reply(&["Okay, it stays shut."])),
    ])
    .await;
    let spoke = Spoke::new(&hub.url);
    let fifo = spoke.path("mic.fifo");
    mouth::make_fifo(&fifo);
    let rc = mouth::asoundrc(
        "spoke_test_mic",
        &fifo,
        "spoke_test_speaker",
        &spoke.path("speaker.out"),
    );
    std::fs::write(spoke.path("home/.asoundrc"), rc).unwrap();
    let phrase = wake_phrase("en-gb-x-rp_m1");
    let yes = espeak(&spoke, "Yes, do it.");
    let no = espeak(&spoke, "No, don't.");
    let mouth = Mouth::open(&fifo);
    let log = std::fs::File::create(spoke.path("daemon.log")).unwrap();
    let _daemon = Daemon(
        spoke
            .command(&["run"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let count = |what: &str| spoke.log().matches(what).count();
    wait(&spoke, "the daemon ready", || count("ready:") >= 1).await;

    // 1. Yes: asked aloud, answered without the wake word, run.
    mouth.say(&phrase);
    wait(&spoke, "the question", || count("asked question") >= 1).await;
    assert_eq!(spoke.opened(), 0, "ran before the answer:\n{}", spoke.log());
    mouth.say(&yes);
    wait(&spoke, "the model told the answer", || {
        hub.requests().len() >= 2
    })
    .await;
    let told = last_message(&hub.requests()[1]);
    assert!(
        told.contains("the user allowed LockSkill.open(5)") && told.contains("value: 1"),
        "{told}\n{}",
        spoke.log()
    );
    assert_eq!(spoke.opened(), 1);
    let log = spoke.log();
    let question = log
        .lines()
        .find(|l| l.contains("asked question"))
        .unwrap_or_default();
    assert!(
        question.contains("Shall I open the front door, with minutes 5?"),
        "{question}"
    );

    // 2. No: not run.
    wait(&spoke, "the first turn's end", || {
        count("turn finished") >= 1
    })
    .await;
    mouth.say(&phrase);
    wait(&spoke, "the second question", || {
        count("asked question") >= 2
    })
    .await;
    mouth.say(&no);
    wait(&spoke, "the model told the no", || {
        hub.requests().len() >= 4
    })
    .await;
    let told = last_message(&hub.requests()[3]);
    assert!(
        told.contains("the user said no to LockSkill.open(5)"),
        "{told}"
    );

    // 3. Silence: a no once `vad.confirm_ms` passed.
    wait(&spoke, "the second turn's end", || {
        count("turn finished") >= 2
    })
    .await;
    mouth.say(&phrase);
    wait(&spoke, "the third question", || {
        count("asked question") >= 3
    })
    .await;
    wait(&spoke, "the model told the silence", || {
        hub.requests().len() >= 6
    })
    .await;
    let told = last_message(&hub.requests()[5]);
    assert!(
        told.contains("the user said no to LockSkill.open(5)"),
        "{told}"
    );
    assert_eq!(spoke.opened(), 1, "{}", spoke.log());
    drop(mouth);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_shows_the_question_and_the_answer_from_the_recording() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let hub = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&[CALL])),
        Reply::Chunks(text_reply(&["The door is open."])),
    ])
    .await;
    let spoke = Spoke::new(&hub.url);
    // The command, a pause while the spoke would ask, then the answer.
    let mut recording = wake_phrase("en-us_m7");
    recording.extend(vec![0.0; 16_000]);
    recording.extend(espeak(&spoke, "Yes, do it."));
    let wav = spoke.path("session.wav");
    strawberry_spoke::audio::wav::write_wav(&wav, &recording, 16_000).unwrap();
    let mut cmd = spoke.command(&["listen"]);
    cmd.arg(&wav).arg("--out").arg(spoke.path("reply.wav"));
    let output = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let stages = [
        "transcript",
        "needs confirmation: LockSkill.open(5)",
        "asked: Shall I open the front door, with minutes 5?",
        "answer ended",
        "answer: \"Yes, do it.\": yes",
        "reply: The door is open.",
    ];
    let mut from = 0;
    for stage in stages {
        let at = stdout[from..]
            .find(stage)
            .unwrap_or_else(|| panic!("{stage:?} missing or out of order:\n{stdout}"));
        from += at + stage.len();
    }
    assert_eq!(spoke.opened(), 1);
    assert!(last_message(&hub.requests()[1]).contains("the user allowed LockSkill.open(5)"));
}
