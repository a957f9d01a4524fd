//! A microphone without a sound card: ALSA `file` PCMs over `null` whose `infile` is a
//! FIFO this harness writes, declared in an `.asoundrc` under a test-only `HOME`. The
//! capture opens them at the FIFO's own format (`audio.input_rate`, `input_channels`,
//! `input_format`), so the conversion under test is ours, not ALSA's.
//!
//! Found here (alsa-lib 1.2.8): the `null` slave is not paced (3 s of capture came back
//! in 18 ms), so the FIFO, not a clock, sets the pace; and a `plug` in front of the
//! file plugin loses most of the data as soon as it converts anything (rate, channels
//! or format: 0.37 s of a 1 s tone came through `arecord`), while the bare file plugin
//! passes it intact. So the harness declares bare file PCMs, writes whole frames with
//! blocking writes (a writer that is slower than the reader makes it read short), and
//! the capture reads as fast as the writer goes: bursts, not real time. A pause in
//! writing is a device that delivers nothing.
//!
//! ALSA reads its configuration once per process, so every device the tests use is
//! declared up front, and tests that use them take [`lock`] to run one at a time.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// A fake input: its ALSA name and the format its FIFO carries (s16le, interleaved).
#[derive(Debug, Clone, Copy)]
pub struct Mic {
    /// The name `audio.input` takes.
    pub name: &'static str,
    /// What `audio devices` shows as its description.
    pub description: &'static str,
    /// Frames per second written to the FIFO.
    pub rate: u32,
    /// Interleaved channels written to the FIFO.
    pub channels: u16,
}

/// 44.1 kHz stereo, as a USB headset or a HAT might deliver.
pub const MIC_44K_STEREO: Mic = Mic {
    name: "spoke_test_44k",
    description: "strawberry test mic 44.1 kHz stereo",
    rate: 44_100,
    channels: 2,
};

/// 16 kHz mono, the rate everything downstream wants.
pub const MIC_16K_MONO: Mic = Mic {
    name: "spoke_test_16k",
    description: "strawberry test mic 16 kHz mono",
    rate: 16_000,
    channels: 1,
};

/// 16 kHz mono, for the test whose source ends: a capture thread may stay blocked
/// opening its FIFO after the test, which no other test's FIFO should have to share.
pub const MIC_THAT_ENDS: Mic = Mic {
    name: "spoke_test_ends",
    description: "strawberry test mic whose source ends",
    rate: 16_000,
    channels: 1,
};

/// Every fake input, declared up front.
pub const MICS: [Mic; 3] = [MIC_44K_STEREO, MIC_16K_MONO, MIC_THAT_ENDS];

struct Setup {
    dir: PathBuf,
}

static SETUP: OnceLock<Setup> = OnceLock::new();
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn fifo_path(dir: &Path, mic: &Mic) -> PathBuf {
    dir.join(format!("{}.fifo", mic.name))
}

/// Declares the fake inputs and points this process's `HOME` at them. Call before
/// anything touches ALSA; every test in the binary does, through [`lock`].
fn setup() -> &'static Setup {
    SETUP.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("spoke-alsa-{}", std::process::id()));
        let home = dir.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut rc = String::new();
        for mic in &MICS {
            let fifo = fifo_path(&dir, mic);
            let _ = std::fs::remove_file(&fifo);
            let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
            // SAFETY: a valid NUL-terminated path; mkfifo only reads it.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
            rc.push_str(&format!(
                "pcm.{n} {{\n type file\n slave.pcm \"null\"\n file \"/dev/null\"\n infile \"{f}\"\n format \"raw\"\n hint {{ show on description \"{d}\" }}\n}}\n",
                n = mic.name,
                f = fifo.display(),
                d = mic.description,
            ));
        }
        std::fs::write(home.join(".asoundrc"), rc).unwrap();
        // SAFETY: set once, before any test in this binary has touched ALSA (all of
        // them come through here first, under the lock).
        unsafe { std::env::set_var("HOME", &home) };
        Setup { dir }
    })
}

/// Sets up the fake inputs and keeps other ALSA tests in this binary waiting.
pub fn lock() -> MutexGuard<'static, ()> {
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    setup();
    guard
}

/// What to write, in segments: audio, or a pause in which nothing is written.
pub enum Segment {
    /// Interleaved samples in `[-1, 1]`, written as fast as the FIFO takes them.
    Audio(Vec<f32>),
    /// Write nothing for this long (the device stalls).
    Pause(Duration),
}

/// Feeds one fake input. Holds the FIFO open until dropped, so the reader never sees
/// end-of-file while the test runs; drop it before the capture, so a reader blocked on
/// the empty FIFO gets end-of-file and the stream can close.
pub struct Feeder {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    _fifo: File,
}

impl Feeder {
    /// Starts writing to `mic`'s FIFO.
    pub fn start(mic: Mic, segments: Vec<Segment>) -> Feeder {
        let path = fifo_path(&setup().dir, &mic);
        // Read-write and non-blocking: opening never waits for a reader, the reader
        // never sees end-of-file while this is open, and a full pipe is EAGAIN.
        let fifo = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        // Writes block: a writer that sleeps on a full pipe lets the (unpaced) reader
        // empty it and read short.
        let mut writer = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let thread = std::thread::spawn(move || {
            for segment in segments {
                match segment {
                    Segment::Audio(samples) => {
                        if !write_all(&mut writer, &samples, mic, &stop2) {
                            return;
                        }
                    }
                    Segment::Pause(d) => std::thread::sleep(d),
                }
            }
        });
        Feeder {
            stop,
            thread: Some(thread),
            _fifo: fifo,
        }
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            // A writer blocked on a full pipe nobody reads any more: drain it here, so
            // it finishes and the next test starts with an empty FIFO.
            let mut buf = vec![0u8; 65536];
            while !t.is_finished() {
                if let Err(e) = std::io::Read::read(&mut self._fifo, &mut buf)
                    && e.kind() == std::io::ErrorKind::WouldBlock
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            let _ = t.join();
            while std::io::Read::read(&mut self._fifo, &mut buf).is_ok_and(|n| n > 0) {}
        }
    }
}

/// Writes interleaved samples as s16le in whole frames; false once stopped.
fn write_all(fifo: &mut File, samples: &[f32], mic: Mic, stop: &AtomicBool) -> bool {
    let bytes: Vec<u8> = samples
        .iter()
        .flat_map(|&x| ((x.clamp(-1.0, 1.0) * 32767.0) as i16).to_le_bytes())
        .collect();
    let frame = usize::from(mic.channels) * 2;
    // Whole frames per write, so the FIFO never ends in part of a frame.
    for chunk in bytes.chunks(16384 / frame * frame) {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        fifo.write_all(chunk).expect("writing the FIFO");
    }
    true
}

/// A sine at `freq` Hz, `seconds` long, at `rate`, amplitude `amp`.
pub fn sine(freq: f64, rate: u32, seconds: f64, amp: f64) -> Vec<f32> {
    (0..(f64::from(rate) * seconds) as usize)
        .map(|i| {
            (amp * (2.0 * std::f64::consts::PI * freq * i as f64 / f64::from(rate)).sin()) as f32
        })
        .collect()
}

/// A linear chirp from `f0` to `f1` Hz: unlike a sine, it lines up with itself at one
/// lag only, so correlation finds where it is.
pub fn chirp(f0: f64, f1: f64, rate: u32, seconds: f64, amp: f64) -> Vec<f32> {
    let k = (f1 - f0) / seconds;
    (0..(f64::from(rate) * seconds) as usize)
        .map(|i| {
            let t = i as f64 / f64::from(rate);
            (amp * (2.0 * std::f64::consts::PI * (f0 * t + 0.5 * k * t * t)).sin()) as f32
        })
        .collect()
}

/// Interleaves channels of equal length.
pub fn interleave(channels: &[Vec<f32>]) -> Vec<f32> {
    let len = channels[0].len();
    (0..len)
        .flat_map(|i| channels.iter().map(move |c| c[i]))
        .collect()
}
