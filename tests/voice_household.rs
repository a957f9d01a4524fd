//! Two spokes in earshot of each other: both hear "hey strawberry", exactly one (the
//! one that heard it louder) answers. Two real `run` daemons on one real mosquitto,
//! each with its own FIFO microphone fed the same recording at different levels, each
//! with its own scripted hub so the test sees who answered.

use std::time::Duration;

use crate::support::daemon::{Daemon, NotifySocket, Spoke, wake_phrase};
use crate::support::llm::{Reply, ScriptedServer, text_reply};
use crate::support::mouth::Mouth;
use crate::support::{cpu, mosquitto, poll};

const STEP: Duration = Duration::from_secs(30);
const IDLE: &str = "Listening for \"";
/// Trials each way: the issue asks for at least 20.
const TRIALS: usize = 20;

struct Room {
    name: String,
    spoke: Spoke,
    hub: ScriptedServer,
    notify: NotifySocket,
    mouth: Mouth,
    daemon: Option<Daemon>,
}

impl Room {
    async fn start(name: &str, id: &str, broker: &mosquitto::Broker) -> Room {
        let replies = (0..TRIALS * 2 + 6)
            .map(|_| Reply::Chunks(text_reply(&["Sunny."])))
            .collect();
        let hub = ScriptedServer::start(replies).await;
        let extra = format!(
            "cues = false\n\n[mqtt]\nbroker = \"{}\"\ndevice_id = \"{id}\"\n",
            broker.url()
        );
        let spoke = Spoke::named(name, &hub.url, &[], &extra);
        let notify = NotifySocket::bind(&spoke);
        let mouth = Mouth::open(&spoke.path("mic.fifo"));
        let daemon = Some(spoke.run(&notify));
        notify.wait_status(&spoke, IDLE, 0, STEP);
        Room {
            name: name.to_string(),
            spoke,
            hub,
            notify,
            mouth,
            daemon,
        }
    }

    fn answered(&self) -> usize {
        self.hub.requests().len()
    }
}

/// A failing trial shows what each daemon logged: the reason is in there.
impl Drop for Room {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- {} log ---\n{}", self.name, self.spoke.log());
        }
    }
}

/// `samples` at `db` (0 or negative).
fn at_level(samples: &[f32], db: f32) -> Vec<f32> {
    let gain = 10f32.powf(db / 20.0);
    samples.iter().map(|s| s * gain).collect()
}

/// Both rooms hear the phrase (the second `delay_ms` later); waits until `expected`
/// rooms answered and every room is idle again; returns who answered.
fn trial(rooms: &[&Room; 2], phrase: &[f32], levels: [f32; 2], delay_ms: usize) -> [bool; 2] {
    let before = rooms.map(Room::answered);
    let statuses = rooms.map(|r| r.notify.statuses().len());
    let played = rooms.map(|r| r.spoke.played());
    rooms[0].mouth.say(&at_level(phrase, levels[0]));
    let mut late = vec![0.0; delay_ms * 16];
    late.extend(at_level(phrase, levels[1]));
    rooms[1].mouth.say(&late);
    poll::wait_until("an answer", STEP, || {
        rooms.iter().zip(before).any(|(r, b)| r.answered() > b)
    });
    // Each room that answers goes back to idle after its reply; wait for those, then
    // give the other as long again (a late double answer shows up in that time).
    for (room, (b, s)) in rooms.iter().zip(before.into_iter().zip(statuses)) {
        if room.answered() > b {
            let (answering, _) = room.notify.wait_status(&room.spoke, "Answering", s, STEP);
            room.notify.wait_status(&room.spoke, IDLE, answering, STEP);
        }
    }
    let answered = [0, 1].map(|i| rooms[i].answered() > before[i]);
    for (i, room) in rooms.iter().enumerate() {
        if !answered[i] {
            assert!(
                !room.spoke.sounded_since(played[i]),
                "{} stays quiet",
                room.name
            );
        }
    }
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_louder_spoke_answers_and_only_it() {
    let _cores = cpu::quiet().await;
    let mut broker = mosquitto::Broker::start();
    let kitchen = Room::start("Kitchen", "kitchen", &broker).await;
    let hall = Room::start("Hall", "hall", &broker).await;
    // Both online (each sees the other's retained status as it comes).
    for id in ["kitchen", "hall"] {
        broker.wait_retained(&format!("strawberry/devices/{id}/status"), STEP, |s| {
            s == "online"
        });
    }
    let phrase = wake_phrase("en-gb-x-rp_m1");
    let rooms = [&kitchen, &hall];
    let mut outcomes = Vec::new();
    for i in 0..TRIALS * 2 {
        let louder_first = i % 2 == 0;
        let levels = if louder_first {
            [0.0, -12.0]
        } else {
            [-12.0, 0.0]
        };
        let answered = trial(&rooms, &phrase, levels, 0);
        let expected = if louder_first {
            [true, false]
        } else {
            [false, true]
        };
        outcomes.push((levels, answered));
        assert_eq!(
            answered, expected,
            "trial {i} at {levels:?} dB: kitchen answered {}, hall {}; outcomes so far {outcomes:?}",
            answered[0], answered[1]
        );
    }

    // The louder spoke heard it 400 ms late: the round was decided without it.
    let answered = trial(&rooms, &phrase, [-12.0, 0.0], 400);
    assert_eq!(
        answered,
        [true, false],
        "a late detection loses to the round's winner"
    );

    // No broker: each spoke answers on its own, whether or not it noticed yet (a
    // claim that goes nowhere leaves the spoke the winner of its round).
    broker.kill();
    let before = rooms.map(Room::answered);
    kitchen.mouth.say(&phrase);
    hall.mouth.say(&at_level(&phrase, -12.0));
    poll::wait_until("both spokes to answer without a broker", STEP, || {
        kitchen.answered() > before[0] && hall.answered() > before[1]
    });
    for mut room in [kitchen, hall] {
        if let Some(d) = room.daemon.take() {
            d.stop();
        }
    }
}
