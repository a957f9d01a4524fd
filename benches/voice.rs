//! The daemon as a user meets it: memory of `strawberry-spoke run` with tiny.en q8_0
//! loaded, and the latency from the last sample of a spoken command to the first
//! sample of the spoken reply, against a scripted hub that answers at once.
//!
//! `cargo bench --bench voice` (after `tests/setup.sh`). The daemon runs as its own
//! process with an ALSA `file` microphone fed from a FIFO at real-time pace (16 kHz
//! mono s16, room hiss between commands) and an ALSA `file` speaker; cues are off so
//! the first audio after a command is the reply. Latency is measured outside the
//! daemon: from the moment the feeder wrote the command's last sample to the moment
//! the speaker file first grew. Each of the 8 espeak-ng voices of the wake word set
//! says "hey strawberry, what is the weather like tomorrow" once. Memory is read from
//! `/proc/PID/status`: VmRSS after 10 s idle and again 5 s after the last command,
//! VmHWM (the peak) at the end. `VOICE_BENCH_MODEL=base` runs the multilingual base
//! model (q8_0, `stt.language = "auto"` among en/de/fr/es) instead of tiny.en.
//! Under `cargo test` this target only checks that its inputs exist.

#[path = "../tests/support/mod.rs"]
#[allow(dead_code, reason = "a benchmark uses a few of the test helpers")]
mod support;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use llm::{Reply, ScriptedServer, text_reply};
use mouth::{Mouth, WAKE_VOICES, asoundrc, make_fifo, wake_phrase};
use stt::{base_model, cache_dir, ggml_model};

use support::{llm, mouth, stt};

/// `VmRSS` / `VmHWM` of a process, in MiB.
fn memory(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        for voice in WAKE_VOICES {
            let phrase = wake_phrase(&cache_dir(), voice);
            assert!(
                phrase.is_file(),
                "{} (run tests/setup.sh)",
                phrase.display()
            );
        }
        println!("voice benchmark: run it with `cargo bench --bench voice`");
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let hub = rt.block_on(ScriptedServer::cycling(vec![Reply::Chunks(text_reply(&[
        "Tomorrow will be sunny. ",
        "Enjoy your day.",
    ]))]));
    let model = match std::env::var("VOICE_BENCH_MODEL").as_deref() {
        Ok("base") => base_model("q8_0"),
        _ => ggml_model("q8_0"),
    };
    println!("model {}", model.display());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name);
    std::fs::create_dir_all(path("home")).expect("home");
    std::fs::create_dir_all(path("skills")).expect("skills");
    let fifo = path("mic.fifo");
    make_fifo(&fifo);
    let speaker = path("speaker.out");
    std::fs::write(
        path("home/.asoundrc"),
        asoundrc("bench_mic", &fifo, "bench_speaker", &speaker),
    )
    .expect("asoundrc");
    std::fs::write(
        path("config.toml"),
        format!(
            "[device]\nname = \"Bench\"\ndata_dir = \"{}\"\n[skills]\ndir = \"{}\"\n[stt]\nmodel = \"{}\"\nthreads = 2\nlanguages = [\"en\", \"de\", \"fr\", \"es\"]\n[[hub.endpoints]]\nurl = \"{}\"\nmodel = \"bench\"\n[audio]\ninput = \"bench_mic\"\ninput_rate = 16000\ninput_channels = 1\ninput_format = \"i16\"\noutput = \"bench_speaker\"\ncues = false\n",
            path("data").display(),
            path("skills").display(),
            model.display(),
            hub.url
        ),
    )
    .expect("config");
    let notify = UnixDatagram::bind(path("notify")).expect("notify socket");
    notify
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mouth = Mouth::open(&fifo);
    let log = std::fs::File::create(path("daemon.log")).expect("log");
    let daemon = std::process::Command::new(env!("CARGO_BIN_EXE_strawberry-spoke"))
        .arg("--config")
        .arg(path("config.toml"))
        .arg("run")
        .env("HOME", path("home"))
        .env("NOTIFY_SOCKET", path("notify"))
        .env("RUST_LOG", "info,whisper_rs=warn")
        .stderr(log)
        .spawn()
        .expect("daemon");
    let pid = daemon.id();
    // Killed however this ends, so a failed run leaves no daemon behind.
    struct Guard(std::process::Child);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut daemon = Guard(daemon);
    let mut buf = [0u8; 512];
    let ready = Instant::now();
    loop {
        let n = notify.recv(&mut buf).expect("READY=1 from the daemon");
        if String::from_utf8_lossy(&buf[..n]).contains("READY=1") {
            break;
        }
    }
    println!("ready {:.2} s after start", ready.elapsed().as_secs_f64());
    std::thread::sleep(Duration::from_secs(10));
    let idle = memory(pid, "VmRSS:");
    let size = || std::fs::metadata(&speaker).map(|m| m.len()).unwrap_or(0);
    println!("| voice | last speech sample -> first reply sample |");
    println!("| --- | --- |");
    let mut latencies = Vec::new();
    for voice in WAKE_VOICES {
        let (samples, _) =
            strawberry_spoke::audio::wav::read_wav_16k(&wake_phrase(&cache_dir(), voice))
                .expect("phrase");
        // The speaker device truncates its file when it is opened for a reply, so the
        // file is removed and its reappearance with data is the reply's first sample.
        let _ = std::fs::remove_file(&speaker);
        mouth.say(&samples);
        let started = Instant::now();
        let (ended, grew) = loop {
            if let Some(ended) = mouth.ended()
                && size() > 0
            {
                break (ended, Instant::now());
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no reply for {voice}"
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        let latency = grew.saturating_duration_since(ended).as_secs_f64();
        println!("| {voice} | {:.3} s |", latency);
        latencies.push(latency);
        // Let the reply finish and the room go quiet before the next command.
        std::thread::sleep(Duration::from_secs(3));
    }
    std::thread::sleep(Duration::from_secs(5));
    let rss_after = memory(pid, "VmRSS:");
    let peak = memory(pid, "VmHWM:");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = daemon.0.wait();
    drop(mouth);
    latencies.sort_by(f64::total_cmp);
    let median = latencies[latencies.len() / 2];
    println!();
    println!(
        "latency: median {:.3} s, best {:.3} s, worst {:.3} s over {} commands",
        median,
        latencies[0],
        latencies[latencies.len() - 1],
        latencies.len()
    );
    println!(
        "memory: VmRSS idle {idle:.1} MiB, idle again after the commands {rss_after:.1} MiB, peak (VmHWM) {peak:.1} MiB"
    );
    let logged: Vec<String> = std::fs::read_to_string(path("daemon.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split("latency_ms=").nth(1))
        .filter_map(|v| v.split_whitespace().next().map(String::from))
        .collect();
    println!("the daemon's own latency log (ms): {}", logged.join(", "));
}
