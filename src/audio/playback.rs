//! The speaker: a thread that opens the cpal output when there is something to play,
//! and a WAV file sink with the same interface for `listen --out`.
//!
//! Why open on demand: an unpaced device (ALSA's `file`/`null`, used in tests) would
//! spin if held open, and without echo cancellation nothing needs the stream between
//! replies. The speaker is done ([`Output::busy`] false) once the queue has run dry and
//! a short tail of silence has been written; the stream stays open a few seconds longer
//! ([`LINGER`]), both counted in samples rather than wall time, so a real card has played
//! what it was given and an unpaced one closes at once.
//!
//! Why it stays open for good once the echo canceller is fed ([`Player::feed_echo`]) and
//! the device keeps real time: every open starts the card's buffers anew and moves the
//! delay between playing and hearing by a few ms. The canceller then has to find it again
//! while the start of the sound passes it: a timer that rings minutes after the last reply
//! would begin with its echo barely cancelled, loud enough to be taken for someone talking
//! over it. Writing silence between sounds keeps the delay where the canceller found it,
//! as a sound server's echo-cancel module keeps its sink running; it costs the callback's
//! wake-ups, and the card is held (through `dmix` it stays shared). Whether the device
//! keeps real time is read from what it took: an unpaced one has taken far more audio
//! than the time it has been open, and closes after [`LINGER`] as before.
//!
//! The callback never blocks: it `try_lock`s the queue and writes silence if it is
//! contended. A missing or failing output is logged with the outputs that exist; what was
//! to be played is dropped, and the next reply tries again. Nothing here panics on what
//! the device does.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};

use super::echo::Reference;
use super::resample::resample;

/// Silence written after the last sample before the speaker counts as done.
const TAIL: Duration = Duration::from_millis(250);

/// Silence written after the last sample before the stream is closed (when it may be):
/// longer than the gap between two rings of a timer (`daemon::ringing::RING_GAP`).
const LINGER: Duration = Duration::from_millis(3_000);

/// How far ahead of the wall clock a device may take audio and still be keeping real
/// time: its buffers, filled at once when it opens.
const PACED_SLACK: Duration = Duration::from_millis(1_000);

/// Where speech and cues go: the speaker, or a file.
pub trait Output: Send + Sync {
    /// Queues mono samples in `[-1, 1]` at `rate`; returns at once.
    fn play(&self, samples: &[f32], rate: u32);
    /// Drops everything queued and not yet played.
    fn stop(&self);
    /// Whether something is queued or playing.
    fn busy(&self) -> bool;
    /// When the first sample since the last [`Output::mark`] went out.
    fn first_audio(&self) -> Option<Instant>;
    /// Starts a new measurement for [`Output::first_audio`].
    fn mark(&self);
}

/// What the player and its callback share.
#[derive(Debug, Default)]
struct Shared {
    /// Mono samples at the open device's rate.
    queue: Mutex<VecDeque<f32>>,
    /// Play requests made, and those the player thread has queued (or dropped): any
    /// in between are on their way.
    requested: AtomicU64,
    handled: AtomicU64,
    /// Something queued has not yet been followed by [`TAIL`] of silence.
    sounding: AtomicBool,
    /// Silent samples written since the queue ran dry.
    silence: AtomicU64,
    /// Frames written since the stream was opened.
    written: AtomicU64,
    first_audio: Mutex<Option<Instant>>,
    /// Bumped by `stop`: audio resampled for an older generation is not queued.
    generation: AtomicU64,
    /// The echo canceller's reference: gets everything the callback writes.
    echo: OnceLock<Reference>,
}

enum Request {
    Play(Vec<f32>, u32, u64),
}

/// The speaker: plays on the configured cpal output. Dropping it stops playback.
pub struct Player {
    requests: Option<Sender<Request>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Player {
    /// Starts the player thread for `output` (an ALSA PCM name or description, empty
    /// for the default) at `volume` (1.0 unchanged). Devices are opened on demand.
    pub fn start(output: &str, volume: f32) -> std::io::Result<Player> {
        let shared = Arc::new(Shared::default());
        let (tx, rx) = mpsc::channel();
        let owner = Owner {
            output: output.to_string(),
            volume,
            shared: shared.clone(),
            requests: rx,
        };
        let thread = std::thread::Builder::new()
            .name("audio-playback".into())
            .spawn(move || owner.run())?;
        Ok(Player {
            requests: Some(tx),
            shared,
            thread: Some(thread),
        })
    }

    /// From now on, everything this player writes to the speaker (silence included) is
    /// also handed to `reference`, the echo canceller's. Only the first call counts.
    pub fn feed_echo(&self, reference: Reference) {
        let _ = self.shared.echo.set(reference);
    }
}

impl Output for Player {
    fn play(&self, samples: &[f32], rate: u32) {
        if samples.is_empty() {
            return;
        }
        self.shared.requested.fetch_add(1, Ordering::SeqCst);
        let generation = self.shared.generation.load(Ordering::SeqCst);
        if let Some(tx) = &self.requests {
            let _ = tx.send(Request::Play(samples.to_vec(), rate, generation));
        }
    }

    fn stop(&self) {
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        lock(&self.shared.queue).clear();
    }

    fn busy(&self) -> bool {
        // `handled` first: the player thread sets `sounding` before it counts a request
        // handled, so a request counted here is seen sounding, and one not yet is pending.
        let handled = self.shared.handled.load(Ordering::SeqCst);
        let sounding = self.shared.sounding.load(Ordering::SeqCst);
        sounding || self.shared.requested.load(Ordering::SeqCst) != handled
    }

    fn first_audio(&self) -> Option<Instant> {
        *lock(&self.shared.first_audio)
    }

    fn mark(&self) {
        *lock(&self.shared.first_audio) = None;
    }
}

impl Drop for Player {
    fn drop(&mut self) {
        self.stop();
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct Owner {
    output: String,
    volume: f32,
    shared: Arc<Shared>,
    requests: Receiver<Request>,
}

struct Open {
    _stream: cpal::Stream,
    rate: u32,
    opened: Instant,
    errors: Receiver<String>,
    /// Underruns counted by the stream's error callback, reported after each sound and
    /// when it closes.
    xruns: Arc<AtomicU64>,
    device: String,
}

impl Open {
    /// Says, at warn level, how often the output ran dry since it last said so: a reply
    /// that sounded cut or garbled on a busy board shows in the log.
    fn report_underruns(&self) {
        let count = self.xruns.swap(0, Ordering::Relaxed);
        if count > 0 {
            tracing::warn!(
                device = %self.device,
                underruns = count,
                "audio output underruns while playing: the board was too busy to feed the speaker in time, so the reply may have sounded cut"
            );
        }
    }
}

impl Owner {
    fn run(self) {
        let mut open: Option<Open> = None;
        loop {
            let request = if open.is_some() {
                // Often while something sounds, to see its tail end; seldom while an open
                // speaker only plays silence.
                let tick = if self.shared.sounding.load(Ordering::SeqCst) {
                    Duration::from_millis(10)
                } else {
                    Duration::from_millis(100)
                };
                match self.requests.recv_timeout(tick) {
                    Ok(r) => Some(r),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => {
                        if let Some(o) = &open {
                            o.report_underruns();
                        }
                        return;
                    }
                }
            } else {
                self.shared.sounding.store(false, Ordering::SeqCst);
                match self.requests.recv() {
                    Ok(r) => Some(r),
                    Err(_) => return,
                }
            };
            if let Some(Request::Play(samples, rate, generation)) = request {
                self.queue(&mut open, &samples, rate, generation);
                self.shared.handled.fetch_add(1, Ordering::SeqCst);
            }
            let Some(o) = &open else { continue };
            if let Ok(message) = o.errors.try_recv() {
                tracing::warn!(device = %o.device, "audio output failed: {message}; closing it");
                o.report_underruns();
                lock(&self.shared.queue).clear();
                self.shared.sounding.store(false, Ordering::SeqCst);
                open = None;
                continue;
            }
            let samples_of = |d: Duration| u64::from(o.rate) * d.as_millis() as u64 / 1000;
            let drained = lock(&self.shared.queue).is_empty();
            let silence = self.shared.silence.load(Ordering::SeqCst);
            if drained
                && silence >= samples_of(TAIL)
                && self.shared.sounding.swap(false, Ordering::SeqCst)
            {
                // Per sound, not per open: an output kept open never closes.
                o.report_underruns();
            }
            let written = self.shared.written.load(Ordering::SeqCst);
            let cancelling = self.shared.echo.get().is_some()
                && keeps_real_time(written, o.rate, o.opened.elapsed());
            if drained && silence >= samples_of(LINGER) && !cancelling {
                o.report_underruns();
                tracing::debug!(device = %o.device, "audio output closed");
                open = None;
            }
        }
    }

    /// Queues `samples` for the output, opening it first if it is closed; drops them
    /// (logged) when it cannot be opened or they were stopped meanwhile.
    fn queue(&self, open: &mut Option<Open>, samples: &[f32], rate: u32, generation: u64) {
        if open.is_none() {
            match self.open() {
                Ok(o) => *open = Some(o),
                Err(error) => {
                    tracing::warn!("{error}; the reply is not played");
                    return;
                }
            }
        }
        let Some(o) = open else { return };
        let mut out = match resample(samples, rate, o.rate) {
            Ok(out) => out,
            Err(error) => {
                tracing::warn!("{error}; the reply is not played");
                return;
            }
        };
        for s in &mut out {
            *s = (*s * self.volume).clamp(-1.0, 1.0);
        }
        if generation == self.shared.generation.load(Ordering::SeqCst) {
            lock(&self.shared.queue).extend(out);
            self.shared.silence.store(0, Ordering::SeqCst);
            self.shared.sounding.store(true, Ordering::SeqCst);
        }
    }

    fn open(&self) -> Result<Open, String> {
        let host = cpal::default_host();
        let outputs = || {
            host.output_devices()
                .map(|d| d.map(|d| super::capture::device_id(&d)).collect::<Vec<_>>())
                .unwrap_or_default()
                .join(", ")
        };
        let device = find_output(&host, &self.output).ok_or_else(|| {
            format!(
                "no audio output {:?}; outputs here: {}; set audio.output to one of them",
                self.output,
                outputs()
            )
        })?;
        let id = super::capture::device_id(&device);
        let fail = |e: String| {
            format!(
                "audio output {id:?} cannot be opened: {e}; outputs here: {}",
                outputs()
            )
        };
        let supported = device
            .default_output_config()
            .map_err(|e| fail(e.to_string()))?;
        let format = supported.sample_format();
        let config = supported.config();
        let channels = usize::from(config.channels.max(1));
        let rate = config.sample_rate;
        let shared = self.shared.clone();
        let (errors, error_rx) = mpsc::sync_channel(8);
        let xruns = Arc::new(AtomicU64::new(0));
        self.shared.written.store(0, Ordering::SeqCst);
        let stream = device
            .build_output_stream_raw(
                config,
                format,
                move |data: &mut cpal::Data, _: &cpal::OutputCallbackInfo| {
                    fill(data, channels, rate, &shared);
                },
                super::capture::stream_errors(errors, xruns.clone()),
                None,
            )
            .map_err(|e| fail(e.to_string()))?;
        stream.play().map_err(|e| fail(e.to_string()))?;
        tracing::debug!(device = %id, rate = config.sample_rate, channels, %format, "audio output open");
        Ok(Open {
            _stream: stream,
            rate: config.sample_rate,
            opened: Instant::now(),
            errors: error_rx,
            xruns,
            device: id,
        })
    }
}

/// Whether a device that took `written` frames at `rate` in `elapsed` since it opened
/// plays them at about real-time pace (a sound card), not as fast as they come (a file).
fn keeps_real_time(written: u64, rate: u32, elapsed: Duration) -> bool {
    let taken = Duration::from_secs_f64(written as f64 / f64::from(rate.max(1)));
    taken <= elapsed + PACED_SLACK
}

fn find_output(host: &cpal::Host, name: &str) -> Option<cpal::Device> {
    if name.is_empty() {
        return host.default_output_device();
    }
    super::capture::find_named(host, name, host.output_devices().ok())
}

/// The callback: queued samples, each copied to every channel, then silence; what it
/// wrote (mono) also goes to the echo canceller's reference, if there is one.
fn fill(data: &mut cpal::Data, channels: usize, rate: u32, shared: &Shared) {
    use cpal::{FromSample, I24, SampleFormat as F, SizedSample, U24};
    fn write<T: SizedSample + FromSample<f32>>(
        out: &mut [T],
        channels: usize,
        rate: u32,
        shared: &Shared,
    ) {
        let frames = out.len() / channels;
        let echo = shared.echo.get();
        let mut played = Vec::with_capacity(if echo.is_some() { frames } else { 0 });
        let mut taken = 0;
        if let Ok(mut queue) = shared.queue.try_lock() {
            for frame in out.chunks_exact_mut(channels) {
                let Some(s) = queue.pop_front() else { break };
                frame.fill(T::from_sample(s));
                if echo.is_some() {
                    played.push(s);
                }
                taken += 1;
            }
        }
        for frame in out.chunks_exact_mut(channels).skip(taken) {
            frame.fill(T::EQUILIBRIUM);
        }
        if let Some(echo) = echo {
            played.resize(frames, 0.0);
            echo.played(played, rate);
        }
        if taken > 0
            && let Ok(mut first) = shared.first_audio.try_lock()
        {
            first.get_or_insert_with(Instant::now);
        }
        shared.written.fetch_add(frames as u64, Ordering::Relaxed);
        let silent = (frames - taken) as u64;
        if taken == frames {
            shared.silence.store(0, Ordering::Relaxed);
        } else {
            shared.silence.fetch_add(silent, Ordering::Relaxed);
        }
    }
    match data.sample_format() {
        F::I8 => data
            .as_slice_mut::<i8>()
            .map(|d| write(d, channels, rate, shared)),
        F::I16 => data
            .as_slice_mut::<i16>()
            .map(|d| write(d, channels, rate, shared)),
        F::I24 => data
            .as_slice_mut::<I24>()
            .map(|d| write(d, channels, rate, shared)),
        F::I32 => data
            .as_slice_mut::<i32>()
            .map(|d| write(d, channels, rate, shared)),
        F::U8 => data
            .as_slice_mut::<u8>()
            .map(|d| write(d, channels, rate, shared)),
        F::U16 => data
            .as_slice_mut::<u16>()
            .map(|d| write(d, channels, rate, shared)),
        F::U24 => data
            .as_slice_mut::<U24>()
            .map(|d| write(d, channels, rate, shared)),
        F::U32 => data
            .as_slice_mut::<u32>()
            .map(|d| write(d, channels, rate, shared)),
        F::F32 => data
            .as_slice_mut::<f32>()
            .map(|d| write(d, channels, rate, shared)),
        F::F64 => data
            .as_slice_mut::<f64>()
            .map(|d| write(d, channels, rate, shared)),
        _ => {
            data.bytes_mut().fill(0);
            shared.silence.fetch_add(u64::MAX / 2, Ordering::Relaxed);
            None
        }
    };
}

/// Collects everything played, at the first rate it was given, and writes it to a
/// 16-bit WAV file on [`WavSink::finish`]. For `listen --out`, and for tests.
pub struct WavSink {
    path: PathBuf,
    volume: f32,
    audio: Mutex<(Vec<f32>, u32)>,
    first_audio: Mutex<Option<Instant>>,
}

impl WavSink {
    /// A sink that will write `path`.
    pub fn new(path: &Path, volume: f32) -> WavSink {
        WavSink {
            path: path.to_path_buf(),
            volume,
            audio: Mutex::new((Vec::new(), 0)),
            first_audio: Mutex::new(None),
        }
    }

    /// Writes the file; returns how many seconds it holds.
    pub fn finish(&self) -> Result<f64, super::wav::AudioError> {
        let (samples, rate) = &*lock(&self.audio);
        let rate = if *rate == 0 {
            super::SAMPLE_RATE
        } else {
            *rate
        };
        super::wav::write_wav(&self.path, samples, rate)?;
        Ok(samples.len() as f64 / f64::from(rate))
    }
}

impl Output for WavSink {
    fn play(&self, samples: &[f32], rate: u32) {
        let mut audio = lock(&self.audio);
        if audio.1 == 0 {
            audio.1 = rate;
        }
        let at = audio.1;
        let converted = match resample(samples, rate, at) {
            Ok(converted) => converted,
            Err(error) => {
                tracing::warn!("{error}; the audio is not written");
                return;
            }
        };
        audio.0.extend(
            converted
                .into_iter()
                .map(|s| (s * self.volume).clamp(-1.0, 1.0)),
        );
        lock(&self.first_audio).get_or_insert_with(Instant::now);
    }

    fn stop(&self) {}

    fn busy(&self) -> bool {
        false
    }

    fn first_audio(&self) -> Option<Instant> {
        *lock(&self.first_audio)
    }

    fn mark(&self) {
        *lock(&self.first_audio) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wav_sink_keeps_the_first_rate_and_applies_the_volume() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.wav");
        let sink = WavSink::new(&path, 0.5);
        assert!(sink.first_audio().is_none());
        sink.play(&vec![0.8; 16_000], 16_000);
        sink.play(&vec![0.8; 8_000], 8_000);
        assert!(sink.first_audio().is_some());
        let secs = sink.finish().unwrap();
        assert!((secs - 2.0).abs() < 0.01, "{secs}");
        let (samples, rec) = super::super::wav::read_wav_16k(&path).unwrap();
        assert_eq!(rec.sample_rate, 16_000);
        assert!((samples[8_000] - 0.4).abs() < 0.01, "{}", samples[8_000]);
    }

    #[test]
    fn a_device_that_takes_audio_faster_than_it_plays_does_not_keep_real_time() {
        let second = Duration::from_secs(1);
        // A card: its buffers filled at once, then the wall clock's pace.
        assert!(keeps_real_time(48_000 / 2, 48_000, Duration::ZERO));
        assert!(keeps_real_time(48_000 * 61, 48_000, 60 * second));
        // A file: a minute of audio taken in a second.
        assert!(!keeps_real_time(48_000 * 60, 48_000, second));
    }

    #[test]
    fn the_callback_drains_the_queue_then_counts_silence() {
        let shared = Shared::default();
        lock(&shared.queue).extend([0.5f32; 3]);
        let mut buf = [1.0f32; 8];
        let ptr = buf.as_mut_ptr() as *mut ();
        // SAFETY: `buf` outlives `data`, and the length and format describe it.
        let mut data = unsafe { cpal::Data::from_parts(ptr, 8, cpal::SampleFormat::F32) };
        fill(&mut data, 2, 16_000, &shared);
        assert_eq!(buf, [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.0, 0.0]);
        assert_eq!(shared.silence.load(Ordering::SeqCst), 1);
        assert!(shared.first_audio.lock().unwrap().is_some());
    }
}
