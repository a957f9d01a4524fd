//! The voice pipeline end to end through the real binary: `listen` on recordings and a
//! whole `run` session through an ALSA microphone fed from a FIFO and an ALSA file
//! speaker, against the scripted hub, with systemd's notify socket, ended by SIGTERM.
//! Recordings come from `tests/setup.sh` (espeak-ng voices); speech to text uses the
//! real tiny.en weights.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::llm::{Reply, ScriptedServer, text_reply};
use crate::support::mouth::{Mouth, WAKE_VOICES};
use crate::support::stt::{cache_dir, ggml_model};
use crate::support::{cpu, mouth, stt};

/// A spoke's files: config, skills, data, and a HOME holding its ALSA devices.
struct Spoke {
    dir: tempfile::TempDir,
}

impl Spoke {
    fn new(hub_url: &str, extra: &str) -> Spoke {
        let dir = tempfile::tempdir().unwrap();
        let skills = dir.path().join("skills");
        std::fs::create_dir(&skills).unwrap();
        std::fs::create_dir(dir.path().join("home")).unwrap();
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

{extra}
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
}

fn wake_phrase(voice: &str) -> PathBuf {
    mouth::wake_phrase(&cache_dir(), voice)
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Speaks `text` with espeak-ng into a WAV file.
fn espeak(text: &str, out: &Path) {
    let status = Command::new("espeak-ng")
        .args(["-v", "en-us", "-w"])
        .arg(out)
        .arg(text)
        .status()
        .expect("espeak-ng");
    assert!(status.success());
}

fn rms(samples: &[f32]) -> f32 {
    (samples.iter().map(|s| s * s).sum::<f32>() / samples.len().max(1) as f32).sqrt()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_runs_a_recording_through_every_stage_and_speaks_the_reply() {
    let _cores = cpu::heavy().await;
    let hub = ScriptedServer::start(vec![Reply::Chunks(text_reply(&[
        "It will be sunny ",
        "tomorrow, with a high of twenty degrees. ",
        "Shall I remind you to take sunglasses?",
    ]))])
    .await;
    let spoke = Spoke::new(&hub.url, "");
    let reply = spoke.path("reply.wav");
    let mut cmd = spoke.command(&["listen"]);
    cmd.arg(wake_phrase("en-us_m7")).arg("--out").arg(&reply);
    let output = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    // Every stage, in order.
    let stages = [
        "wake word \"hey strawberry\"",
        "speech ended",
        "transcript",
        "reply: It will be sunny tomorrow, with a high of twenty degrees.",
        "reply: Shall I remind you to take sunglasses?",
        "first audio out",
        "reply audio:",
    ];
    let mut from = 0;
    for stage in stages {
        let at = stdout[from..]
            .find(stage)
            .unwrap_or_else(|| panic!("{stage:?} missing or out of order:\n{stdout}"));
        from += at + stage.len();
    }
    // The wake word ends about where the phrase file says; the command follows it.
    let end: f64 = std::fs::read_to_string(cache_dir().join("wake/phrase/en-us_m7.end"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let speech = stdout
        .lines()
        .find(|l| l.contains("speech ended"))
        .and_then(|l| l.split("spoken ").nth(1))
        .and_then(|s| s.split('-').next())
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no speech start in:\n{stdout}"));
    assert!(
        speech >= end - 0.1 && speech < end + 0.8,
        "command starts at {speech}, wake word ends at {end}"
    );
    // What the model was asked is what was said after the wake word.
    let requests = hub.requests();
    assert_eq!(requests.len(), 1);
    let asked = requests[0]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        asked.contains("weather") && asked.contains("tomorrow"),
        "{asked:?}"
    );
    assert!(
        !asked.contains("strawberry"),
        "the wake word reached the model: {asked:?}"
    );
    // The reply was spoken: several seconds of audible speech (cues included).
    let (samples, recording) = strawberry_spoke::audio::wav::read_wav_16k(&reply).unwrap();
    let secs = samples.len() as f64 / 16_000.0;
    assert!(recording.sample_rate >= 16_000);
    assert!(secs > 3.0, "{secs} s of reply");
    assert!(rms(&samples) > 0.02, "rms {}", rms(&samples));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_phrase_stops_without_asking_the_model() {
    let _cores = cpu::heavy().await;
    let hub = ScriptedServer::start(vec![]).await;
    let spoke = Spoke::new(&hub.url, "");
    let wav = spoke.path("stop.wav");
    espeak("Stop.", &wav);
    let mut cmd = spoke.command(&["listen", "--no-wake"]);
    cmd.arg(&wav);
    let output = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("stop phrase"), "{stdout}");
    assert!(hub.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_without_the_wake_word_is_said_to_be_one() {
    let _cores = cpu::heavy().await;
    let hub = ScriptedServer::start(vec![]).await;
    let spoke = Spoke::new(&hub.url, "");
    let wav = spoke.path("other.wav");
    espeak("What is the weather like tomorrow?", &wav);
    let mut cmd = spoke.command(&["listen"]);
    cmd.arg(&wav);
    let output = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("no command heard (no wake word)"),
        "{stdout}"
    );
    assert!(hub.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_hub_is_spoken_as_an_apology_not_a_crash() {
    let _cores = cpu::heavy().await;
    let hub = ScriptedServer::start(vec![Reply::Status(500, "model crashed".into())]).await;
    let spoke = Spoke::new(&hub.url, "");
    let reply = spoke.path("reply.wav");
    let mut cmd = spoke.command(&["listen"]);
    cmd.arg(wake_phrase("en-gb_f3")).arg("--out").arg(&reply);
    let output = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stdout.contains("error:"), "{stdout}");
    let (samples, _) = strawberry_spoke::audio::wav::read_wav_16k(&reply).unwrap();
    assert!(samples.len() > 16_000, "the apology was not spoken");
}

/// The `run` daemon's devices: a FIFO microphone at 16 kHz mono s16 and a speaker
/// that writes a WAV file, declared in the spoke's `~/.asoundrc`.
fn declare_devices(spoke: &Spoke, mic: &str) -> (PathBuf, PathBuf) {
    let fifo = spoke.path("mic.fifo");
    mouth::make_fifo(&fifo);
    let speaker = spoke.path("speaker.out");
    let rc = mouth::asoundrc(mic, &fifo, "spoke_test_speaker", &speaker);
    std::fs::write(spoke.path("home/.asoundrc"), rc).unwrap();
    (fifo, speaker)
}

const DEVICES: &str = r#"[audio]
input = "spoke_test_mic"
input_rate = 16000
input_channels = 1
input_format = "i16"
output = "spoke_test_speaker"
"#;

/// Collects systemd notifications sent to a socket, on a thread of its own so the
/// daemon's queue never fills while the test looks elsewhere.
struct NotifySocket {
    path: PathBuf,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl NotifySocket {
    fn bind(spoke: &Spoke) -> NotifySocket {
        let path = spoke.path("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends when the test's temporary directory (and the socket) goes away.
            while let Ok(n) = socket.recv(&mut buf) {
                sink.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        });
        NotifySocket { path, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until a notification contains `what`; false after `timeout`.
    fn wait_for(&self, what: &str, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if self.seen().iter().any(|m| m.contains(what)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

/// The daemon, killed if the test ends early.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_daemon(spoke: &Spoke, notify: &NotifySocket) -> Daemon {
    let log = std::fs::File::create(spoke.path("daemon.log")).unwrap();
    Daemon(
        spoke
            .command(&["run"])
            .env("NOTIFY_SOCKET", &notify.path)
            .env("WATCHDOG_USEC", "1000000")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

/// SIGTERM, then the time until the process exited.
fn terminate(child: &mut Child) -> (Duration, std::process::ExitStatus) {
    let pid = i32::try_from(child.id()).unwrap();
    let sent = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (sent.elapsed(), status);
        }
        if sent.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("the daemon did not stop within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last user message of a request the hub received, lower case.
fn asked(request: &serde_json::Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_lowercase()
}

/// Waits (without holding up the runtime) until `done` or `secs` pass.
async fn until(secs: u64, what: &str, log: impl Fn() -> String, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(secs),
            "{what}: not within {secs} s:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_run_session_answers_follows_up_is_interrupted_and_stops_on_sigterm() {
    let _cores = cpu::quiet().await;
    let hub = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&[
            "Tomorrow will be sunny. ",
            "Shall I remind you to take sunglasses?",
        ])),
        // The second reply starts and then hangs: the model is still "thinking" when
        // the wake word comes again.
        Reply::StallAfter(text_reply(&["Okay, I will "])[..2].to_vec()),
        Reply::Chunks(text_reply(&["Still sunny."])),
    ])
    .await;
    let spoke = Spoke::new(&hub.url, DEVICES);
    let (fifo, speaker) = declare_devices(&spoke, "spoke_test_mic");
    let notify = std::sync::Arc::new(NotifySocket::bind(&spoke));
    let (phrase, _) =
        strawberry_spoke::audio::wav::read_wav_16k(&wake_phrase("en-gb-x-rp_m1")).unwrap();
    let yes_wav = spoke.path("yes.wav");
    espeak("Yes, please.", &yes_wav);
    let (yes, _) = strawberry_spoke::audio::wav::read_wav_16k(&yes_wav).unwrap();
    let mouth = Mouth::open(&fifo);
    let mut daemon = start_daemon(&spoke, &notify);
    let log = || std::fs::read_to_string(spoke.path("daemon.log")).unwrap_or_default();
    let seen = |what: &'static str| {
        let notify = notify.clone();
        move || notify.seen().iter().any(|m| m.contains(what))
    };
    until(60, "READY=1", log, seen("READY=1")).await;
    until(5, "WATCHDOG=1", log, seen("WATCHDOG=1")).await;

    // 1. Wake word and command: answered, and the answer asks something.
    mouth.say(&phrase);
    until(30, "first reply", log, || {
        log().contains("first audio of the reply")
    })
    .await;
    assert!(
        asked(&hub.requests()[0]).contains("weather"),
        "{:?}",
        hub.requests()
    );
    until(
        10,
        "follow-up listening",
        log,
        seen("STATUS=Listening for an answer"),
    )
    .await;
    // 2. The answer, without the wake word.
    mouth.say(&yes);
    until(20, "the follow-up answer", log, || {
        hub.requests().len() >= 2
    })
    .await;
    assert!(
        asked(&hub.requests()[1]).contains("yes"),
        "{:?}",
        hub.requests()
    );
    // 3. While that reply hangs, the wake word interrupts it and a new command runs.
    mouth.say(&phrase);
    until(30, "barge-in", log, || hub.requests().len() >= 3).await;
    assert!(log().contains("interrupted"), "{}", log());
    // Spoken, not only written: replies 1 and 3 reached the speaker (2 was cut off).
    until(20, "the third reply, spoken", log, || {
        log().contains("Still sunny.") && log().matches("first audio of the reply").count() >= 2
    })
    .await;

    let notify2 = notify.clone();
    let took = tokio::task::spawn_blocking(move || {
        assert!(
            notify2.wait_for("STATUS=Answering", Duration::from_secs(1)),
            "{:?}",
            notify2.seen()
        );
        let (took, status) = terminate(&mut daemon.0);
        assert!(status.success(), "exit status {status}");
        took
    })
    .await
    .unwrap();
    assert!(took < Duration::from_secs(2), "SIGTERM took {took:?}");
    assert!(
        notify.wait_for("STOPPING=1", Duration::from_secs(1)),
        "{:?}",
        notify.seen()
    );
    drop(mouth);
    let log = log();
    assert!(log.contains("wake word"), "{log}");
    assert!(log.contains("Tomorrow will be sunny."), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    // The replies reached the speaker: the file device holds non-silent audio.
    let bytes = std::fs::read(&speaker).unwrap();
    assert!(
        bytes.len() > 20_000,
        "{} bytes reached the speaker",
        bytes.len()
    );
    assert!(
        bytes.iter().filter(|&&b| b != 0).count() > 10_000,
        "only silence reached the speaker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_microphone_is_reported_the_daemon_stays_up_and_reloads_on_sighup() {
    let _cores = cpu::quiet().await;
    let hub = ScriptedServer::start(vec![]).await;
    let spoke = Spoke::new(&hub.url, &DEVICES.replace("spoke_test_mic", "no_such_mic"));
    declare_devices(&spoke, "spoke_test_mic");
    let notify = NotifySocket::bind(&spoke);
    let mut daemon = start_daemon(&spoke, &notify);
    let config = spoke.path("config.toml");
    let log_path = spoke.path("daemon.log");
    let done = tokio::task::spawn_blocking(move || {
        let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        let readies = || {
            notify
                .seen()
                .iter()
                .filter(|m| m.contains("READY=1"))
                .count()
        };
        assert!(
            notify.wait_for("READY=1", Duration::from_secs(60)),
            "{:?}",
            notify.seen()
        );
        assert!(
            notify.wait_for("STATUS=Microphone unavailable", Duration::from_secs(10)),
            "{:?}",
            notify.seen()
        );
        assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon exited");
        let pid = i32::try_from(daemon.0.id()).unwrap();
        let hup = || {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGHUP) };
        };
        // A broken file is reported and the running configuration stays.
        let good = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, format!("{good}volume = 900\n")).unwrap();
        hup();
        let until = Instant::now() + Duration::from_secs(10);
        while !log().contains("configuration not reloaded") {
            assert!(Instant::now() < until, "no reload error:\n{}", log());
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(log().contains("audio.volume"), "{}", log());
        assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon exited");
        // A good one is applied: the parts restart and say they are ready again.
        let before = readies();
        std::fs::write(&config, good.replace("Test Box", "Renamed Box")).unwrap();
        hup();
        let until = Instant::now() + Duration::from_secs(30);
        while readies() <= before || !log().contains("Renamed Box") {
            assert!(
                Instant::now() < until,
                "no reload: {:?}\n{}",
                notify.seen(),
                log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            notify
                .seen()
                .iter()
                .any(|m| m.starts_with("RELOADING=1\nMONOTONIC_USEC="))
        );
        let (took, status) = terminate(&mut daemon.0);
        assert!(status.success(), "exit status {status}");
        assert!(took < Duration::from_secs(2), "SIGTERM took {took:?}");
        log()
    });
    let log = done.await.unwrap();
    assert!(
        log.contains("no_such_mic") && log.contains("spoke_test_mic"),
        "the log should name the missing input and the ones that exist:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakeword_record_prompts_for_takes_from_the_microphone_and_trains_on_them() {
    let _cores = cpu::quiet().await;
    let spoke = Spoke::new("http://127.0.0.1:9/v1", DEVICES);
    let (fifo, _) = declare_devices(&spoke, "spoke_test_mic");
    let mut takes = Vec::new();
    for (i, voice) in ["en-us+m7", "en-gb+f3", "en-us+m7"].iter().enumerate() {
        let wav = spoke.path(&format!("said-{i}.wav"));
        let status = Command::new("espeak-ng")
            .args(["-v", voice, "-s", "145", "-w"])
            .arg(&wav)
            .arg("hey strawberry")
            .status()
            .expect("espeak-ng");
        assert!(status.success());
        let (samples, _) = strawberry_spoke::audio::wav::read_wav_16k(&wav).unwrap();
        takes.push(samples);
    }
    let mouth = Mouth::open(&fifo);
    let out = spoke.path("mine.rpw");
    let mut cmd = spoke.command(&[
        "wakeword",
        "train",
        "--name",
        "hey strawberry",
        "--record",
        "3",
        "-o",
    ]);
    cmd.arg(&out);
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The recorder listens to the room for a moment, then prompts; say each take after
    // a pause, as a person would.
    for take in &takes {
        mouth.say(&vec![0.0; 16_000]);
        mouth.say(take);
    }
    mouth.say(&vec![0.0; 16_000]);
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    drop(mouth);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stderr.matches("say \"hey strawberry\" now").count(),
        3,
        "{stderr}"
    );
    for i in 1..=3 {
        assert!(
            spoke
                .path(&format!("mine.rpw.takes/take-0{i}.wav"))
                .is_file(),
            "{stderr}"
        );
    }
    assert!(stdout.contains("from 3 recordings"), "{stdout}");
    // The word it made hears the phrase in a recording it was not made from.
    let mut test = spoke.command(&["wakeword", "test"]);
    test.arg(&out).arg(wake_phrase("en-us_m7"));
    let tested = tokio::task::spawn_blocking(move || test.output().unwrap())
        .await
        .unwrap();
    let (stdout, stderr) = text(&tested);
    assert!(
        tested.status.success() && stdout.contains("1 detection"),
        "{stdout}\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_voices_through_the_microphone_wake_are_cut_and_transcribed() {
    let _cores = cpu::quiet().await;
    let hub = ScriptedServer::cycling(vec![Reply::Chunks(text_reply(&["Okay."]))]).await;
    let spoke = Spoke::new(&hub.url, &format!("{DEVICES}cues = false\n"));
    let (fifo, _) = declare_devices(&spoke, "spoke_test_mic");
    let notify = NotifySocket::bind(&spoke);
    let mouth = Mouth::open(&fifo);
    let _daemon = start_daemon(&spoke, &notify);
    let log = || std::fs::read_to_string(spoke.path("daemon.log")).unwrap_or_default();
    until(60, "READY=1", log, || {
        notify.seen().iter().any(|m| m.contains("READY=1"))
    })
    .await;
    let voices = WAKE_VOICES;
    for voice in voices {
        let (phrase, _) = strawberry_spoke::audio::wav::read_wav_16k(&wake_phrase(voice)).unwrap();
        mouth.say(&phrase);
        mouth.say(&vec![0.0; 40_000]);
    }
    let commands = || log().matches("command heard").count();
    until(120, "eight commands", log, || {
        commands() >= voices.len() && log().matches("transcript").count() >= voices.len()
    })
    .await;
    let log = log();
    assert_eq!(
        log.matches("wake word word=").count(),
        voices.len(),
        "{log}"
    );
    assert_eq!(commands(), voices.len(), "{log}");
    let transcripts: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("transcript"))
        .filter_map(|l| l.split("text=").nth(1))
        .collect();
    let pairs = transcripts
        .iter()
        .map(|t| ("what is the weather like tomorrow", *t));
    let wer = stt::word_error_rate(pairs);
    let heard: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("command heard") || l.contains("wake word"))
        .collect();
    assert!(
        wer <= 0.10,
        "word error rate {wer:.3} over {transcripts:?}\n{}",
        heard.join("\n")
    );
    assert!(
        !log.contains("falling behind"),
        "frames were dropped:\n{log}"
    );
}

#[test]
fn every_command_starts_where_its_wake_word_ended_not_just_the_first() {
    use strawberry_spoke::daemon::listener::{Heard, Listener};
    use strawberry_spoke::wake::{Detector, Settings, WakeWord};
    let detector =
        Detector::with_word(&Settings::default(), &WakeWord::bundled().unwrap()).unwrap();
    let mut listener = Listener::new(
        detector,
        strawberry_spoke::vad::VadSettings::default(),
        1_000,
    );
    let mut stream = Vec::new();
    let mut ends = Vec::new();
    for voice in ["en-us_m7", "en-gb_f3", "en-us_Andy"] {
        let (phrase, _) = strawberry_spoke::audio::wav::read_wav_16k(&wake_phrase(voice)).unwrap();
        let end: f64 =
            std::fs::read_to_string(cache_dir().join(format!("wake/phrase/{voice}.end")))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
        ends.push(stream.len() as f64 / 16_000.0 + end);
        stream.extend(phrase);
        stream.extend(vec![0.0; 32_000]);
    }
    let starts: Vec<f64> = strawberry_spoke::audio::wav::frames(&stream, 0)
        .filter_map(|f| listener.push(&f))
        .filter_map(|h| match h {
            Heard::Command(c) => Some(c.start as f64 / 16_000.0),
            _ => None,
        })
        .collect();
    assert_eq!(starts.len(), ends.len(), "{starts:?}");
    for (start, end) in starts.iter().zip(&ends) {
        assert!(
            *start >= end - 0.05 && *start < end + 0.8,
            "command at {start:.2} s, wake word ended at {end:.2} s"
        );
    }
}
