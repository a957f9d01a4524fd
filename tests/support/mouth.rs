//! The far side of a FIFO microphone: writes 16 kHz mono s16 into an ALSA `file`
//! device's FIFO at real-time pace, with faint room hiss when there is nothing to say,
//! and records when the last sample of each utterance went in. Used by `tests/voice.rs`
//! and `benches/voice.rs`, which run the daemon as its own process. What else the
//! microphone hears (the spoke's own speaker, `tests/support/live_room.rs`) is added to
//! each chunk by a [`Background`] on the same thread, so one clock paces both.

use std::collections::VecDeque;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The espeak-ng voices of `tests/setup.sh`'s wake word set (file names).
pub const WAKE_VOICES: [&str; 8] = [
    "en-gb-scotland",
    "en-us-nyc_f3",
    "en-gb-x-gbclan_m4",
    "en-us_m7",
    "en-gb_f3",
    "en-gb-x-rp_m1",
    "en-us_Annie",
    "en-us_Andy",
];

/// Makes a FIFO at `path`.
pub fn make_fifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().expect("a UTF-8 path")).expect("no NUL");
    // SAFETY: a valid NUL-terminated path; mkfifo only reads it.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {}",
        path.display()
    );
}

/// An `.asoundrc` declaring `mic` (reading `fifo`) and `speaker` (writing `out`), both
/// bare `file` PCMs over `null` (see `tests/support/alsa.rs` for why bare).
pub fn asoundrc(mic: &str, fifo: &Path, speaker: &str, out: &Path) -> String {
    format!(
        "pcm.{mic} {{\n type file\n slave.pcm \"null\"\n file \"/dev/null\"\n infile \"{}\"\n format \"raw\"\n}}\npcm.{speaker} {{\n type file\n slave.pcm \"null\"\n file \"{}\"\n format \"raw\"\n}}\n",
        fifo.display(),
        out.display()
    )
}

/// Samples per chunk written: 20 ms.
pub const CHUNK: usize = 320;

/// What the microphone hears besides the person: adds itself to each 20 ms chunk, on
/// the writing thread, just before the chunk goes into the FIFO.
pub type Background = Box<dyn FnMut(&mut [f32; CHUNK]) + Send>;

/// Writes into the FIFO until dropped.
pub struct Mouth {
    queue: Arc<Mutex<VecDeque<(f32, bool)>>>,
    ended: Arc<Mutex<Option<Instant>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Mouth {
    /// Starts writing hiss into `fifo`.
    pub fn open(fifo: &Path) -> Mouth {
        Mouth::open_with(fifo, Box::new(|_| {}))
    }

    /// [`Mouth::open`], with `background` heard too.
    pub fn open_with(fifo: &Path, mut background: Background) -> Mouth {
        // Held open read-write so the daemon never sees end-of-file between writes.
        let keep = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo)
            .expect("open the FIFO");
        // Non-blocking, so a daemon that stopped reading (it crashed, or the test is
        // over) cannot leave this thread stuck in a write that `drop` waits for.
        let mut writer = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo)
            .expect("open the FIFO");
        let queue = Arc::new(Mutex::new(VecDeque::<(f32, bool)>::new()));
        let ended = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let (q, e, st) = (queue.clone(), ended.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let _keep = keep;
            let started = Instant::now();
            let mut n = 0u64;
            while !st.load(Ordering::SeqCst) {
                let mut last = false;
                let mut samples = [0.0f32; CHUNK];
                {
                    let mut q = q.lock().expect("queue");
                    for s in &mut samples {
                        let (said, is_last) = q.pop_front().unwrap_or((0.0, false));
                        last |= is_last;
                        *s = said;
                    }
                }
                background(&mut samples);
                let chunk: Vec<u8> = samples
                    .iter()
                    .zip(n * CHUNK as u64..)
                    .flat_map(|(s, k)| {
                        let hiss = ((k as f32 * 12.9898).sin() * 43758.547).fract() * 0.002;
                        (((s + hiss).clamp(-1.0, 1.0) * 32767.0) as i16).to_le_bytes()
                    })
                    .collect();
                let mut written = 0;
                while written < chunk.len() {
                    match writer.write(&chunk[written..]) {
                        Ok(n) => written += n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            if st.load(Ordering::SeqCst) {
                                return;
                            }
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(_) => return,
                    }
                }
                if last {
                    *e.lock().expect("ended") = Some(Instant::now());
                }
                n += 1;
                if let Some(wait) = Duration::from_millis(20 * n).checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        });
        Mouth {
            queue,
            ended,
            stop,
            thread: Some(thread),
        }
    }

    /// Says `samples` (16 kHz mono) after what is already queued.
    pub fn say(&self, samples: &[f32]) {
        *self.ended.lock().expect("ended") = None;
        let n = samples.len();
        self.queue
            .lock()
            .expect("queue")
            .extend(samples.iter().enumerate().map(|(i, &s)| (s, i + 1 == n)));
    }

    /// When the last sample of the latest utterance was written, once it was.
    #[allow(dead_code, reason = "only benches/voice.rs times from it")]
    pub fn ended(&self) -> Option<Instant> {
        *self.ended.lock().expect("ended")
    }
}

impl Drop for Mouth {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `tests/setup.sh`'s recording of "hey strawberry, what is the weather like tomorrow"
/// in `voice`.
pub fn wake_phrase(cache: &Path, voice: &str) -> PathBuf {
    cache.join("wake/phrase").join(format!("{voice}.wav"))
}
