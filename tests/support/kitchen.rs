//! A spoke in a kitchen, for tests and benchmarks of it hearing itself: the real `run`
//! daemon (real espeak-ng replies, the real echo canceller, the bundled wake word, real
//! tiny.en weights) whose speaker its own microphone hears through
//! [`LiveRoom`](super::live_room::LiveRoom), a scripted hub whose every reply is long
//! enough to be interrupted, and a person saying "hey strawberry, what is the weather
//! like tomorrow" on cue.
#![allow(dead_code)] // the test and the benchmark use different parts

use std::time::Duration;

use strawberry_spoke::audio::SAMPLE_RATE;
use strawberry_spoke::audio::wav::read_wav_16k;

use super::daemon::{Daemon, NotifySocket, Spoke, wake_phrase};
use super::live_room::{Acoustics, Heard, LiveRoom};
use super::llm::{Reply, ScriptedServer, text_reply};
use super::mouth::{CHUNK, Mouth};
use super::poll;
use super::stt::{cache_dir, wavs};

/// A generous bound on each step (transcribing, the hub, speaking).
pub const STEP: Duration = Duration::from_secs(60);

const IDLE: &str = "Listening for \"";
const WOKEN: &str = "Listening to a command";

/// A shelf speaker a few centimetres from the microphone: its echo is louder at the
/// microphone than a person across the room.
pub const SHELF: Acoustics = Acoustics {
    delay_ms: 20,
    gain: 0.5,
};

/// Replies of 8-12 s, long enough to be interrupted. One says the wake phrase itself, one
/// ends in a question (so the spoke listens for an answer after it).
pub const REPLIES: [&str; 4] = [
    "Tomorrow will be sunny in the morning with a light breeze from the west. In the afternoon \
     clouds gather over the hills and there may be a shower or two before the evening. \
     The temperature stays around fourteen degrees.",
    "Your shopping list has eggs, flour, two lemons, a bag of rice, olive oil, tomatoes, \
     fresh basil and a block of cheese. The second page has washing up liquid and matches. \
     Shall I read the third page as well?",
    "The kitchen lights are on at half brightness, the hallway lamp is off, the heating is set \
     to nineteen degrees, and the back door has been locked since six o'clock this evening.",
    "Here is a short story. Once upon a time a small robot lived on a kitchen shelf. Whenever \
     somebody said hey strawberry, it woke up and told them about the weather, and every \
     evening it read them a story.",
];

/// The spoke in a kitchen: hub, daemon, room and a person.
pub struct Kitchen {
    pub spoke: Spoke,
    pub hub: ScriptedServer,
    pub notify: NotifySocket,
    pub room: LiveRoom,
    pub mouth: Mouth,
    pub daemon: Daemon,
    pub phrase: Vec<f32>,
}

impl Kitchen {
    /// A spoke whose every reply is long, `replies` of them, with `extra` config (in its
    /// `[audio]` section unless it starts another).
    pub async fn start(replies: usize, extra: &str) -> Kitchen {
        let script = (0..replies)
            .map(|i| Reply::Chunks(text_reply(&[REPLIES[i % REPLIES.len()]])))
            .collect();
        Kitchen::with_script(script, extra).await
    }

    /// A spoke whose every command sets a 2 s timer, `timers` of them, that rings for
    /// `ring_ms` unless stopped, with `extra` config (in its `[audio]` section unless it
    /// starts another).
    pub async fn timers(timers: usize, ring_ms: u64, extra: &str) -> Kitchen {
        let script = (0..timers)
            .flat_map(|_| {
                [
                    Reply::Chunks(text_reply(&[
                        "```rhai\ndevice.TimerSkill.start(2, \"tea\")\n```",
                    ])),
                    Reply::Chunks(text_reply(&["Your tea timer is set."])),
                ]
            })
            .collect();
        let extra = format!("{extra}\n[timers]\nring_ms = {ring_ms}");
        Kitchen::with_script(script, &extra).await
    }

    async fn with_script(script: Vec<Reply>, extra: &str) -> Kitchen {
        let hub = ScriptedServer::start(script).await;
        let spoke = Spoke::new(&hub.url, &[], extra);
        let speaker = spoke.speaker_in_room();
        let (room, background) = LiveRoom::open(&speaker, SHELF);
        let mouth = Mouth::open_with(&spoke.path("mic.fifo"), background);
        let notify = NotifySocket::bind(&spoke);
        let daemon = spoke.run(&notify);
        notify.wait_status(&spoke, IDLE, 0, STEP);
        Kitchen {
            spoke,
            hub,
            notify,
            room,
            mouth,
            daemon,
            phrase: wake_phrase("en-gb-x-rp_m1"),
        }
    }

    fn statuses(&self) -> usize {
        self.notify.statuses().len()
    }

    /// The person's level as [`Heard::level_db`] takes the echo's: the mean power of the
    /// wake phrase's audible 20 ms chunks, dB full scale.
    pub fn phrase_db(&self) -> f64 {
        let mut heard = Heard::default();
        for chunk in self.phrase.chunks_exact(CHUNK) {
            heard.add(chunk);
        }
        heard.level_db()
    }

    /// How many times the wake word opened a command outside a reply.
    pub fn wakes(&self) -> usize {
        let statuses = self.notify.statuses();
        statuses.iter().filter(|(_, s)| s == WOKEN).count()
    }

    /// Says the wake phrase and command `cycles` times, each once the spoke is idle
    /// again after its reply (played whole: nothing interrupts it).
    pub fn converse(&self, cycles: usize) {
        for _ in 0..cycles {
            let said = self.statuses();
            self.mouth.say(&self.phrase);
            let (answering, _) = self
                .notify
                .wait_status(&self.spoke, "Answering", said, STEP);
            self.notify.wait_status(&self.spoke, IDLE, answering, STEP);
        }
    }

    /// Barge-in trials: the wake phrase said 3 s into a reply (after 3 s of it heard at
    /// the microphone). Returns, per trial, whether it interrupted the reply; a missed
    /// phrase lets the reply play out, and the next trial's reply is asked for in quiet.
    pub fn barge_in(&self, trials: usize) -> Vec<bool> {
        let mut results = Vec::with_capacity(trials);
        let mut said = self.statuses();
        self.mouth.say(&self.phrase);
        for _ in 0..trials {
            self.notify
                .wait_status(&self.spoke, "Answering", said, STEP);
            let heard = self.room.heard().audible_chunks;
            poll::wait_until("3 s of the reply at the microphone", STEP, || {
                self.room.heard().audible_chunks >= heard + 150
            });
            let asked = self.hub.requests().len();
            said = self.statuses();
            self.mouth.say(&self.phrase);
            let interrupted = poll::wait_for("the reply interrupted or over", STEP, || {
                if self.hub.requests().len() > asked {
                    return Some(true);
                }
                let statuses = self.notify.statuses();
                let idle = statuses.iter().skip(said).any(|(_, s)| s.starts_with(IDLE));
                idle.then_some(false)
            });
            results.push(interrupted);
            if !interrupted {
                said = self.statuses();
                self.mouth.say(&self.phrase);
            }
        }
        results
    }

    /// Stop trials (a [`Kitchen::timers`] spoke): a timer is set by voice, and "stop" is
    /// said 1.5 s into its ring, by the voices of [`held_out_stops`] in turn. Returns, per
    /// trial, how long it rang. A ring that keeps making way for its own sound (no
    /// canceller) can run out before 1.5 s of it was heard: nobody speaks then, and it
    /// counts as not stopped.
    pub fn stop_rings(&self, trials: usize) -> Vec<Duration> {
        let stops = held_out_stops();
        (0..trials)
            .map(|trial| {
                let stop = &stops[trial % stops.len()];
                let said = self.statuses();
                self.mouth.say(&self.phrase);
                let (ringing, at) = self
                    .notify
                    .wait_status(&self.spoke, "Ringing: ", said, STEP);
                let heard = self.room.heard().audible_chunks;
                let over = || {
                    let statuses = self.notify.statuses();
                    statuses[ringing..].iter().any(|(_, s)| s.starts_with(IDLE))
                };
                poll::wait_until(
                    "1.5 s of the ring at the microphone, or its end",
                    STEP,
                    || self.room.heard().audible_chunks >= heard + 75 || over(),
                );
                if !over() {
                    self.mouth.say(stop);
                }
                let (_, quiet) = self.notify.wait_status(&self.spoke, IDLE, ringing, STEP);
                quiet.duration_since(at).unwrap_or_default()
            })
            .collect()
    }
}

/// "Stop" said by each voice `tests/setup.sh` holds out from the wake and stop words'
/// training (`wake/stop/`), without the second of silence on either side: the spoke's
/// own stop word never heard these voices.
pub fn held_out_stops() -> Vec<Vec<f32>> {
    let dir = cache_dir().join("wake/stop");
    let wavs = wavs(&dir, ".wav");
    assert!(!wavs.is_empty(), "no recordings in {}", dir.display());
    let lead = SAMPLE_RATE as usize;
    wavs.iter()
        .map(|wav| {
            let (samples, _) =
                read_wav_16k(wav).unwrap_or_else(|e| panic!("{}: {e}", wav.display()));
            samples[lead..samples.len() - lead].to_vec()
        })
        .collect()
}

/// How many of the rings [`Kitchen::stop_rings`] timed were stopped: one nobody stopped
/// runs its whole `ring_ms`.
pub fn stopped(rang: &[Duration], ring_ms: u64) -> usize {
    rang.iter()
        .filter(|r| r.as_millis() < u128::from(ring_ms) - 1_000)
        .count()
}
