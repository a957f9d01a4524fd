//! Timers, alarms, reminders and announcements, end to end through the real binary:
//! the real `run` daemon hears the wake word through an ALSA microphone fed from a FIFO,
//! model code (from the scripted hub) sets a timer with the bundled `TimerSkill`, and
//! the spoke rings it on its file speaker at its time until "stop" is heard. Real
//! espeak-ng, real tiny.en weights, a real mosquitto for the announcement.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::daemon::{NotifySocket, Spoke, wake_phrase};
use crate::support::llm::{Reply, ScriptedServer, text_reply};
use crate::support::mouth::Mouth;
use crate::support::{cpu, mosquitto, poll};

/// A generous bound on each step (transcribing, the hub, speaking).
const STEP: Duration = Duration::from_secs(30);

/// How late a ring may start after its time: the issue's 1 s, plus the test's own
/// polling and the notification's trip.
const PRECISION: Duration = Duration::from_millis(1_200);

const IDLE: &str = "Listening for \"";

fn code(code: &str) -> Reply {
    Reply::Chunks(text_reply(&[&format!("```rhai\n{code}\n```")]))
}

fn unix_ms(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The due time of the scheduled entry `id`, once it is in the schedule.
fn due_ms(spoke: &Spoke, id: &str) -> i64 {
    poll::wait_for(&format!("{id} in the schedule"), STEP, || {
        let text = std::fs::read_to_string(spoke.path("data/schedule.json")).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        json["entries"]
            .as_array()?
            .iter()
            .find(|e| e["id"] == id)
            .and_then(|e| e["due_ms"].as_i64())
    })
}

fn skills_call(spoke: &Spoke, name: &str, args: &str) -> String {
    let out = spoke
        .command(&["skills", "call", name, args])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "skills call {name} {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_set_by_voice_rings_at_its_time_until_stop_and_reminders_speak() {
    let _cores = cpu::quiet().await;
    let hub = ScriptedServer::start(vec![
        code(r#"let t = device.TimerSkill.start(4, "pasta"); print(`Pasta timer set for ${t.spoken}.`)"#),
        Reply::Chunks(text_reply(&["Your pasta timer is set."])),
        code(r#"device.TimerSkill.remind("call your mother", "in 3 seconds")"#),
        Reply::Chunks(text_reply(&["I will remind you."])),
    ])
    .await;
    let spoke = Spoke::new(&hub.url, &[], "[timers]\nring_ms = 6000\n");
    let notify = NotifySocket::bind(&spoke);
    let mouth = Mouth::open(&spoke.path("mic.fifo"));
    let phrase = wake_phrase("en-gb-x-rp_m1");
    let stop = spoke.espeak("Stop.");
    let daemon = spoke.run(&notify);
    let (ready, _) = notify.wait_status(&spoke, IDLE, 0, STEP);

    // 1. "Set a pasta timer": it rings at its time, again and again, until "stop".
    mouth.say(&phrase);
    let due = due_ms(&spoke, "timer:pasta");
    let (ringing, at) =
        notify.wait_status(&spoke, "Ringing: Your pasta timer is done.", ready, STEP);
    let late = unix_ms(at) - due;
    assert!(
        (-50..PRECISION.as_millis() as i64).contains(&late),
        "rang {late} ms after its time"
    );
    poll::wait_until("a second ring", STEP, || {
        spoke.log().matches("ringing again").count() >= 1
    });
    mouth.say(&stop);
    let (stopped, stopped_at) = notify.wait_status(&spoke, IDLE, ringing, STEP);
    assert!(
        spoke.log().contains("ringing stopped: stop"),
        "{}",
        spoke.log()
    );
    assert!(
        stopped_at.duration_since(at).unwrap() < Duration::from_millis(5_500),
        "stopped by \"stop\", not by timers.ring_ms"
    );
    assert_eq!(hub.requests().len(), 2, "\"stop\" never reaches the model");

    // 2. A reminder says its text; nobody stops it, so it ends after timers.ring_ms.
    mouth.say(&phrase);
    let (reminding, at) = notify.wait_status(
        &spoke,
        "Ringing: Reminder: call your mother.",
        stopped,
        STEP,
    );
    let (_, quiet_at) = notify.wait_status(&spoke, IDLE, reminding, STEP);
    let rang = quiet_at.duration_since(at).unwrap();
    assert!(
        (Duration::from_millis(5_500)..Duration::from_millis(8_000)).contains(&rang),
        "rang {rang:?} with timers.ring_ms = 6000"
    );
    assert_eq!(hub.requests().len(), 4);
    daemon.stop();
    drop(mouth);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_survive_a_restart_and_one_missed_while_down_is_announced() {
    let _cores = cpu::quiet().await;
    let hub = ScriptedServer::start(vec![]).await;
    let spoke = Spoke::new(&hub.url, &[], "[timers]\nring_ms = 30000\n");
    let notify = NotifySocket::bind(&spoke);
    let mouth = Mouth::open(&spoke.path("mic.fifo"));
    let stop = spoke.espeak("Stop.");
    let daemon = spoke.run(&notify);
    let (ready, _) = notify.wait_status(&spoke, IDLE, 0, STEP);

    // Set from a shell while the daemon runs: it rings (another process's change is seen).
    let set = skills_call(&spoke, "TimerSkill.start", r#"[2, "tea"]"#);
    assert!(set.contains("\"tea\""), "{set}");
    let (tea, _) = notify.wait_status(&spoke, "Ringing: Your tea timer is done.", ready, STEP);
    mouth.say(&stop);
    let (idle, _) = notify.wait_status(&spoke, IDLE, tea, STEP);

    // Two timers, then the daemon stops: one comes due while it is down, one after.
    skills_call(&spoke, "TimerSkill.start", r#"[3, "eggs"]"#);
    skills_call(&spoke, "TimerSkill.start", r#"[25, "rice"]"#);
    let eggs = due_ms(&spoke, "timer:eggs");
    let rice = due_ms(&spoke, "timer:rice");
    daemon.stop();
    poll::wait_until("the eggs timer's time to pass", STEP, || {
        unix_ms(SystemTime::now()) > eggs + 1_000
    });
    let daemon = spoke.run(&notify);
    let (missed, _) =
        notify.wait_status(&spoke, "Ringing: Your eggs timer went off at ", idle, STEP);
    mouth.say(&stop);
    let (idle, _) = notify.wait_status(&spoke, IDLE, missed, STEP);
    let (_, at) = notify.wait_status(&spoke, "Ringing: Your rice timer is done.", idle, STEP);
    let late = unix_ms(at) - rice;
    assert!(
        (-50..PRECISION.as_millis() as i64).contains(&late),
        "rang {late} ms after its time"
    );
    daemon.stop();
    drop(mouth);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_room_speaks_here_over_the_broker() {
    let _cores = cpu::quiet().await;
    let broker = mosquitto::Broker::start();
    let hub = ScriptedServer::start(vec![]).await;
    let mqtt = format!(
        "[mqtt]\nbroker = \"{}\"\ndevice_id = \"kitchen\"\n",
        broker.url()
    );
    let kitchen = Spoke::new(&hub.url, &[], &mqtt);
    let notify = NotifySocket::bind(&kitchen);
    let _mouth = Mouth::open(&kitchen.path("mic.fifo"));
    let daemon = kitchen.run(&notify);
    notify.wait_status(&kitchen, IDLE, 0, STEP);

    // The living room: a caller on the same broker.
    let living = Spoke::named(
        "Living Room",
        &hub.url,
        &[],
        &format!(
            "[mqtt]\nbroker = \"{}\"\ndevice_id = \"living-room\"\n",
            broker.url()
        ),
    );
    let mut last = String::new();
    let until = std::time::Instant::now() + STEP;
    poll::wait_for("the kitchen to take a message", STEP * 2, || {
        assert!(
            std::time::Instant::now() < until,
            "the kitchen took no message: {last}\n{}",
            kitchen.log()
        );
        let out = living
            .command(&[
                "exec",
                "-e",
                r#"devices["kitchen"].SpeakerSkill.say("Dinner is ready!")"#,
            ])
            .output()
            .unwrap();
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        out.status.success().then_some(())
    });
    poll::wait_until("the message spoken in the kitchen", STEP, || {
        kitchen.log().contains("announcement text=Dinner is ready!")
    });

    // An announcement from the living room reaches every online spoke.
    let out = living
        .command(&[
            "exec",
            "-e",
            r#"let r = device.SpeakerSkill.announce("We leave in five minutes."); r.spoken"#,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Test Box"), "{stdout}");
    poll::wait_until("the announcement spoken in the kitchen", STEP, || {
        kitchen
            .log()
            .contains("announcement text=We leave in five minutes.")
    });
    daemon.stop();
}

#[test]
fn quiet_hours_refuse_messages_and_serve_cannot_speak() {
    // Quiet from an hour ago to an hour from now, whenever the test runs.
    let hour = jiff::Zoned::now().hour();
    let quiet = format!(
        "[announce]\nquiet_hours = \"{:02}:00-{:02}:00\"\n",
        (hour + 23) % 24,
        (hour + 1) % 24
    );
    let spoke = Spoke::new("http://127.0.0.1:9", &[], &quiet);
    let out = spoke
        .command(&["skills", "call", "SpeakerSkill.say", r#""Hello""#])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("quiet hours") && stderr.contains("announce.quiet_hours"),
        "{stderr}"
    );
    let spoke = Spoke::new("http://127.0.0.1:9", &[], "");
    let out = spoke
        .command(&["skills", "call", "SpeakerSkill.say", r#""Hello""#])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("only `strawberry-spoke run` speaks"),
        "{stderr}"
    );
}
