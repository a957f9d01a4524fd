//! The end of a command: a speaker who pauses mid-sentence ("play some music in the
//! ... kitchen") is not cut off, and a finished command still ends after the short
//! hangover. Through `listen` (a recording, positions in audio time) and the real
//! `run` daemon (a FIFO microphone). Real espeak-ng, real tiny.en weights, the
//! scripted hub.

use std::time::Duration;

use crate::support::daemon::{NotifySocket, Spoke, wake_phrase};
use crate::support::llm::{Reply, ScriptedServer, text_reply};
use crate::support::mouth::Mouth;
use crate::support::stt::cache_dir;
use crate::support::{cpu, poll};

const STEP: Duration = Duration::from_secs(30);

/// "Play some music in the", 600 ms of silence, "kitchen."
fn paused_command(spoke: &Spoke) -> Vec<f32> {
    let mut samples = spoke.espeak("Play some music in the");
    samples.extend(vec![0.0; 9_600]);
    samples.extend(spoke.espeak("kitchen."));
    samples
}

/// "hey strawberry" alone: `tests/setup.sh`'s recording up to the phrase's end (kept
/// next to it), and a moment of silence.
fn wake_word_alone(voice: &str) -> Vec<f32> {
    let end =
        std::fs::read_to_string(cache_dir().join(format!("wake/phrase/{voice}.end"))).unwrap();
    let end = (end.trim().parse::<f64>().unwrap() * 16_000.0) as usize;
    let mut samples = wake_phrase(voice);
    samples.truncate(end);
    samples.extend(vec![0.0; 4_800]);
    samples
}

/// What the model was asked: the last message of the hub's first request (empty
/// before there is one).
fn asked(hub: &ScriptedServer) -> String {
    let requests = hub.requests();
    requests
        .first()
        .and_then(|r| r["messages"].as_array())
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_lowercase()
}

fn whole(text: &str) -> bool {
    text.contains("music") && text.contains("kitchen")
}

/// `listen --no-wake` over `samples`: its stdout.
async fn listen(spoke: &Spoke, samples: &[f32]) -> String {
    let wav = spoke.path("command.wav");
    strawberry_spoke::audio::wav::write_wav(&wav, samples, 16_000).unwrap();
    let mut cmd = spoke.command(&["listen", "--no-wake", "--out"]);
    cmd.arg(spoke.path("reply.wav")).arg(&wav);
    let output = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The `speech ended (spoken A-B s)` line: where the end was decided less where the
/// speech ended, in seconds of audio.
fn decided_after_end(stdout: &str) -> f64 {
    let line = stdout
        .lines()
        .find(|l| l.contains("speech ended"))
        .unwrap_or_else(|| panic!("no end of speech:\n{stdout}"));
    let number = |s: &str| s.trim().parse::<f64>().unwrap();
    let decided = number(line.split(" s").next().unwrap());
    let spoken = line.split("spoken ").nth(1).unwrap();
    let end = number(
        spoken
            .split('-')
            .nth(1)
            .unwrap()
            .split(" s")
            .next()
            .unwrap(),
    );
    decided - end
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_waits_through_a_pause_mid_sentence_and_not_after_a_whole_one() {
    let _cores = cpu::heavy().await;
    let hub = ScriptedServer::start(
        (0..4)
            .map(|_| Reply::Chunks(text_reply(&["Okay."])))
            .collect(),
    )
    .await;
    let spoke = Spoke::new(&hub.url, &[], "cues = false\n");

    let stdout = listen(&spoke, &paused_command(&spoke)).await;
    assert!(whole(&asked(&hub)), "{:?}\n{stdout}", asked(&hub));
    assert!(
        stdout.contains("sounds unfinished"),
        "the pause was not judged:\n{stdout}"
    );
    assert_eq!(stdout.matches("speech ended").count(), 1, "{stdout}");

    // A whole request ends after the short hangover, not the mid-sentence one.
    let hub_before = hub.requests().len();
    let stdout = listen(&spoke, &spoke.espeak("What time is it?")).await;
    assert_eq!(hub.requests().len(), hub_before + 1, "{stdout}");
    let waited = decided_after_end(&stdout);
    assert!(
        waited < 0.6,
        "decided {waited:.2} s after the speech:\n{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_waits_through_a_pause_mid_sentence() {
    let _cores = cpu::quiet().await;
    let hub = ScriptedServer::start(
        (0..4)
            .map(|_| Reply::Chunks(text_reply(&["Okay."])))
            .collect(),
    )
    .await;
    let spoke = Spoke::new(&hub.url, &[], "cues = false\n");
    let notify = NotifySocket::bind(&spoke);
    let mouth = Mouth::open(&spoke.path("mic.fifo"));
    let command = paused_command(&spoke);
    let _daemon = spoke.run(&notify);
    let (ready, _) = notify.wait_status(&spoke, "Listening for \"", 0, STEP);
    // The wake word alone, then the command with its pause.
    mouth.say(&wake_word_alone("en-gb-x-rp_m1"));
    notify.wait_status(&spoke, "Listening to a command", ready, STEP);
    mouth.say(&command);
    poll::wait_until("the command at the hub", STEP, || {
        !hub.requests().is_empty()
    });
    assert!(whole(&asked(&hub)), "{:?}\n{}", asked(&hub), spoke.log());
    assert_eq!(hub.requests().len(), 1, "{}", spoke.log());
}
