//! Confirming by voice, end to end through the real binary: model code calls a
//! `@confirm` skill, the spoke asks aloud and listens for the answer without the wake
//! word. `run` goes through an ALSA microphone fed from a FIFO and a file speaker (as
//! `tests/voice.rs` does), `listen` through a recording whose next utterance is the
//! answer. Real espeak-ng, real tiny.en weights, the scripted hub.

use std::time::Duration;

use crate::support::daemon::{NotifySocket, Spoke, wake_phrase};
use crate::support::llm::{Reply, ScriptedServer, text_reply};
use crate::support::mouth::Mouth;
use crate::support::{cpu, poll};

/// A generous bound on each step of a session (transcribing, the hub, speaking).
const STEP: Duration = Duration::from_secs(30);

const IDLE: &str = "Listening for \"";
/// The status while the spoke waits for a yes or no.
const ASKING: &str = "Listening for yes or no";

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

/// This test's spoke: the lock skill, no cues, a short wait for the answer.
fn spoke(hub_url: &str) -> Spoke {
    Spoke::new(
        hub_url,
        &[("lock.rhai", LOCK)],
        "cues = false\n\n[vad]\nconfirm_ms = 3000\n",
    )
}

/// How many times the skill ran: the lines of its storage journal.
fn opened(spoke: &Spoke) -> usize {
    std::fs::read_to_string(spoke.path("data/skills/LockSkill.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_asks_aloud_and_runs_only_after_a_spoken_yes() {
    let _cores = cpu::quiet().await;
    let hub = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&[CALL])),
        Reply::Chunks(text_reply(&["The door is open."])),
        Reply::Chunks(text_reply(&[CALL])),
        Reply::Chunks(text_reply(&["Okay, it stays shut."])),
        Reply::Chunks(text_reply(&[CALL])),
        Reply::Chunks(text_reply(&["Okay, it stays shut."])),
    ])
    .await;
    let spoke = spoke(&hub.url);
    let notify = NotifySocket::bind(&spoke);
    let phrase = wake_phrase("en-gb-x-rp_m1");
    let yes = spoke.espeak("Yes, do it.");
    let no = spoke.espeak("No, don't.");
    let mouth = Mouth::open(&spoke.path("mic.fifo"));
    let _daemon = spoke.run(&notify);
    let (ready, _) = notify.wait_status(&spoke, IDLE, 0, STEP);
    let requests = |n: usize| {
        poll::wait_until(&format!("{n} requests at the hub"), STEP, || {
            hub.requests().len() >= n
        })
    };

    // 1. Yes: asked aloud, answered without the wake word, run.
    mouth.say(&phrase);
    let (asked, _) = notify.wait_status(&spoke, ASKING, ready, STEP);
    assert_eq!(opened(&spoke), 0, "ran before the answer:\n{}", spoke.log());
    mouth.say(&yes);
    requests(2);
    let told = last_message(&hub.requests()[1]);
    assert!(
        told.contains("the user allowed LockSkill.open(5)") && told.contains("value: 1"),
        "{told}\n{}",
        spoke.log()
    );
    assert_eq!(opened(&spoke), 1);

    // 2. No: not run.
    let (done, _) = notify.wait_status(&spoke, IDLE, asked, STEP);
    mouth.say(&phrase);
    let (asked, _) = notify.wait_status(&spoke, ASKING, done, STEP);
    mouth.say(&no);
    requests(4);
    let told = last_message(&hub.requests()[3]);
    assert!(
        told.contains("the user said no to LockSkill.open(5)"),
        "{told}"
    );

    // 3. Silence: a no once `vad.confirm_ms` passed.
    let (done, _) = notify.wait_status(&spoke, IDLE, asked, STEP);
    mouth.say(&phrase);
    notify.wait_status(&spoke, ASKING, done, STEP);
    requests(6);
    let told = last_message(&hub.requests()[5]);
    assert!(
        told.contains("the user said no to LockSkill.open(5)"),
        "{told}"
    );
    assert_eq!(opened(&spoke), 1, "{}", spoke.log());
    drop(mouth);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_shows_the_question_and_the_answer_from_the_recording() {
    let _cores = cpu::heavy().await;
    let hub = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&[CALL])),
        Reply::Chunks(text_reply(&["The door is open."])),
    ])
    .await;
    let spoke = spoke(&hub.url);
    // The command, a pause while the spoke would ask, then the answer.
    let mut recording = wake_phrase("en-us_m7");
    recording.extend(vec![0.0; 16_000]);
    recording.extend(spoke.espeak("Yes, do it."));
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
    assert_eq!(opened(&spoke), 1);
    assert!(last_message(&hub.requests()[1]).contains("the user allowed LockSkill.open(5)"));
}
