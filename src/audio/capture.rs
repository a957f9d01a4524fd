//! The microphone: one thread owns the cpal input stream and turns whatever the device
//! delivers into 16 kHz mono [`Frame`]s on a channel.
//!
//! Why this split: cpal's callback runs on the audio thread and must never block, so it
//! converts (to f32, mono, 16 kHz: a few hundred multiply-adds per output sample) and
//! `try_send`s whole frames, dropping them with a count if the consumer falls behind;
//! it never waits on a lock or a full channel. Converting in the callback rather than on
//! another thread means a burst from the device (catching up after a hiccup) is paced by
//! the conversion itself instead of overflowing an intermediate queue. The owner thread
//! handles the device's life: a device that is missing, fails to open, errors mid-stream,
//! stops delivering or delivers far faster than real time (an ALSA `null` device, or a
//! `file` device whose source has ended: no clock paces them, and reading them spins the
//! cores) is logged once per attempt with the inputs that do exist, and reopened after a
//! backoff that doubles up to a cap. Nothing here panics on what the device does; the
//! consumer just sees no frames for a while.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};

use super::resample::Resampler;
use super::{FRAME_SAMPLES, Frame, SAMPLE_RATE};

/// Frames queued for the consumer (5 s): beyond this frames are dropped, not hoarded.
const FRAME_QUEUE: usize = 250;

/// How long dropping a [`Capture`] waits for its thread. It ends within a tick when its
/// device answers; one that does not (a driver wedged in open, an ALSA `file` device
/// whose FIFO has no writer) is left to end with the process, so that it never holds up
/// the daemon's shutdown.
const CLOSE_LIMIT: Duration = Duration::from_secs(2);

/// How far a stream may run ahead of the clock before it is taken as not keeping time.
/// A microphone delivers its buffer at once when it opens or catches up after a hiccup
/// (well under a second for ALSA's buffers), so it never gets near this.
const AHEAD_LIMIT: Duration = Duration::from_secs(5);

/// The lead over the clock shrinks while a stream delivers slower than this many times
/// real time: so a sound card's clock drifting from the system's (a fraction of a
/// percent) never adds up to [`AHEAD_LIMIT`] however long it runs.
const AHEAD_DRAIN: f64 = 1.5;

/// What the capture needs: which input and how to retry.
#[derive(Debug, Clone, PartialEq)]
pub struct CaptureSettings {
    /// The input's name (its ALSA PCM id, e.g. `plughw:CARD=Mic,DEV=0`, or its
    /// description's first line), or empty for the default input.
    pub input: String,
    /// First wait before reopening a device that failed.
    pub retry_min: Duration,
    /// Longest wait between attempts.
    pub retry_max: Duration,
    /// A stream that delivers nothing for this long is taken as lost and reopened.
    pub stall_timeout: Duration,
    /// Open the input at this rate instead of its default (e.g. 16000 where the device
    /// has it, to skip resampling). `None`: the device's default.
    pub rate: Option<u32>,
    /// Open the input with this many channels instead of its default.
    pub channels: Option<u16>,
    /// Open the input with this sample format (`i16`, `i24`, `i32`, `f32`...).
    pub format: Option<cpal::SampleFormat>,
}

/// `i16`, `f32`... as a cpal sample format (the names cpal itself prints).
pub fn parse_sample_format(name: &str) -> Option<cpal::SampleFormat> {
    use cpal::SampleFormat as F;
    [
        F::I8,
        F::I16,
        F::I24,
        F::I32,
        F::I64,
        F::U8,
        F::U16,
        F::U24,
        F::U32,
        F::U64,
        F::F32,
        F::F64,
    ]
    .into_iter()
    .find(|f| f.to_string() == name)
}

impl Default for CaptureSettings {
    fn default() -> Self {
        CaptureSettings {
            input: String::new(),
            retry_min: Duration::from_millis(500),
            retry_max: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(3),
            rate: None,
            channels: None,
            format: None,
        }
    }
}

/// Why the microphone could not be opened. Each names the device and what to do.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// No sound system (ALSA) could be reached.
    #[error("no audio host: {0}")]
    Host(String),
    /// The configured input does not exist.
    #[error(
        "no audio input named {name:?}; inputs here: {}; set audio.input to one of them (`strawberry-spoke audio devices` lists them with their formats)",
        list(available)
    )]
    NotFound {
        name: String,
        available: Vec<String>,
    },
    /// There is no default input.
    #[error(
        "no default audio input; inputs here: {}; set audio.input",
        list(available)
    )]
    NoDefault { available: Vec<String> },
    /// The device exists but could not be opened or configured.
    #[error(
        "audio input {device:?} cannot be opened: {message}; inputs here: {}",
        list(available)
    )]
    Open {
        device: String,
        message: String,
        available: Vec<String>,
    },
    /// The device delivers samples in a format this code does not convert.
    #[error("audio input {device:?} uses sample format {format}, which is not supported")]
    Format { device: String, format: String },
    /// The stream failed while running (device unplugged, driver error).
    #[error(
        "audio input {device:?} failed: {message}; it is reopened, but if this repeats check that the device is still plugged in and not taken by another program (`strawberry-spoke audio devices` lists the inputs; `fuser -v /dev/snd/*` shows who holds them)"
    )]
    Stream { device: String, message: String },
    /// The stream stopped delivering audio.
    #[error(
        "audio input {device:?} delivered nothing for {after:?}; it is reopened, but if this repeats the device is gone or cannot stream in the format it was opened in: check `strawberry-spoke audio devices`, or set audio.input_rate, audio.input_channels and audio.input_format to one it has (e.g. 16000, 1, \"i16\")"
    )]
    Stalled { device: String, after: Duration },
    /// The stream delivers audio far faster than real time: no clock paces it.
    #[error(
        "audio input {device:?} delivered {:.1} s of sound in {:.1} s: it is not a microphone keeping time (an ALSA null device, or a file device whose source has ended); set audio.input to a microphone (`strawberry-spoke audio devices` lists them)",
        audio.as_secs_f64(),
        wall.as_secs_f64()
    )]
    Unpaced {
        device: String,
        audio: Duration,
        wall: Duration,
    },
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none found".into()
    } else {
        names.join(", ")
    }
}

/// Where the capture is, for status displays and tests.
#[derive(Debug, Clone, PartialEq)]
pub enum CaptureStatus {
    /// Opening the device.
    Starting,
    /// Frames are flowing.
    Running {
        /// The device's id.
        device: String,
        /// Its native format, e.g. `48000 Hz, 2 ch, f32`.
        format: String,
        /// How many times a device has been opened since the start (more than one:
        /// it was lost and reopened).
        opened: u32,
    },
    /// The last attempt failed; the next comes after `next_in`.
    Retrying {
        /// What went wrong, as logged.
        error: String,
        /// Failed attempts in a row.
        attempts: u32,
        /// The wait before the next attempt.
        next_in: Duration,
    },
}

/// A running microphone capture. Dropping it stops the thread and closes the device.
#[derive(Debug)]
pub struct Capture {
    frames: Receiver<Frame>,
    status: Arc<Mutex<CaptureStatus>>,
    stop: Option<SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
    /// Disconnected when the thread ends (nothing is ever sent).
    exited: Receiver<()>,
}

impl Capture {
    /// Starts the capture thread. It never fails for device reasons: those are logged
    /// and retried (see [`Capture::status`]); only a thread that cannot start is an error.
    pub fn start(settings: CaptureSettings) -> std::io::Result<Capture> {
        let (frame_tx, frames) = mpsc::sync_channel(FRAME_QUEUE);
        let (stop_tx, stop_rx) = mpsc::sync_channel(1);
        let status = Arc::new(Mutex::new(CaptureStatus::Starting));
        let (exiting, exited) = mpsc::sync_channel(0);
        let owner = Owner {
            settings,
            frames: frame_tx,
            stop: stop_rx,
            status: status.clone(),
            shared: Arc::default(),
            opened: 0,
            heard_at: None,
            _exiting: exiting,
        };
        let thread = std::thread::Builder::new()
            .name("audio-capture".into())
            .spawn(move || owner.run())?;
        Ok(Capture {
            frames,
            status,
            stop: Some(stop_tx),
            thread: Some(thread),
            exited,
        })
    }

    /// The frames, in order; positions jump when audio was lost (a device reopened).
    pub fn frames(&self) -> &Receiver<Frame> {
        &self.frames
    }

    /// What the capture is doing now.
    pub fn status(&self) -> CaptureStatus {
        lock(&self.status).clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        // Dropping the sender wakes the owner wherever it waits, but for inside the
        // device's own calls.
        self.stop.take();
        let Some(thread) = self.thread.take() else {
            return;
        };
        if let Err(RecvTimeoutError::Timeout) = self.exited.recv_timeout(CLOSE_LIMIT) {
            tracing::warn!(
                "the microphone thread did not stop within {CLOSE_LIMIT:?}: its device is not answering; it is left to end with the process"
            );
            return;
        }
        let _ = thread.join();
    }
}

fn lock(status: &Mutex<CaptureStatus>) -> std::sync::MutexGuard<'_, CaptureStatus> {
    status
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the callback shares with the owner thread.
#[derive(Debug, Default)]
struct Shared {
    /// 16 kHz samples delivered since the capture started (across reopens).
    position: AtomicU64,
    /// Frames made from the device's audio, to notice a stream that stopped.
    frames: AtomicU64,
    /// Frames the consumer had no room for, since the capture started: counted across
    /// reopens so that the warning about them stays rare (at powers of two) however often
    /// a device that floods it is reopened.
    dropped: AtomicU64,
    /// The consumer dropped its receiver.
    consumer_gone: AtomicBool,
}

/// The callback's state: mono samples in, 16 kHz frames out.
struct Converter {
    channels: usize,
    resampler: Resampler,
    pending: Vec<f32>,
    frames: SyncSender<Frame>,
    shared: Arc<Shared>,
}

impl Converter {
    fn push(&mut self, data: &cpal::Data) {
        let Some(mono) = to_mono_f32(data, self.channels) else {
            return;
        };
        self.resampler.push(&mono, &mut self.pending);
        let whole = self.pending.len() / FRAME_SAMPLES * FRAME_SAMPLES;
        for samples in self.pending[..whole].chunks_exact(FRAME_SAMPLES) {
            let start = self
                .shared
                .position
                .fetch_add(FRAME_SAMPLES as u64, Ordering::Relaxed);
            let frame = Frame {
                start,
                samples: samples.to_vec(),
            };
            // Counted whether or not the consumer keeps up: the device is alive.
            self.shared.frames.fetch_add(1, Ordering::Relaxed);
            match self.frames.try_send(frame) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    let dropped = self.shared.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    if dropped.is_power_of_two() {
                        tracing::warn!(dropped, "audio consumer falling behind: frames dropped");
                    }
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.shared.consumer_gone.store(true, Ordering::Relaxed);
                }
            }
        }
        self.pending.drain(..whole);
    }
}

/// How a running stream ended.
enum Ended {
    Stopped,
    Failed(CaptureError),
}

struct Owner {
    settings: CaptureSettings,
    frames: SyncSender<Frame>,
    stop: Receiver<()>,
    status: Arc<Mutex<CaptureStatus>>,
    shared: Arc<Shared>,
    /// Successful opens so far.
    opened: u32,
    /// When a stream last delivered frames (to within the watch's tick): a device opened
    /// after that moves the positions on by the time in between.
    heard_at: Option<Instant>,
    /// Dropped with the owner, when the thread ends: [`Capture`]'s drop waits for that.
    _exiting: SyncSender<()>,
}

impl Owner {
    fn run(mut self) {
        let mut attempts = 0u32;
        loop {
            let error = match self.open() {
                Ok(open) => match self.pump(open) {
                    Ended::Stopped => return,
                    // A stream that opens but runs ahead of the clock is no better than
                    // one that does not open: the waits go on growing.
                    Ended::Failed(error @ CaptureError::Unpaced { .. }) => error,
                    Ended::Failed(error) => {
                        attempts = 0;
                        error
                    }
                },
                Err(error) => error,
            };
            attempts = attempts.saturating_add(1);
            let next_in = backoff(&self.settings, attempts);
            tracing::warn!(
                attempt = attempts,
                "{error}; retrying in {:.1} s",
                next_in.as_secs_f64()
            );
            *lock(&self.status) = CaptureStatus::Retrying {
                error: error.to_string(),
                attempts,
                next_in,
            };
            match self.stop.recv_timeout(next_in) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        }
    }

    fn open(&mut self) -> Result<OpenStream, CaptureError> {
        let host = cpal::default_host();
        let device = find_input(&host, &self.settings.input)?;
        let id = device_id(&device);
        let open_err = |e: cpal::Error| CaptureError::Open {
            device: id.clone(),
            message: e.to_string(),
            available: input_names(&host),
        };
        let supported = self
            .choose_config(&device)
            .map_err(|message| CaptureError::Open {
                device: id.clone(),
                message,
                available: input_names(&host),
            })?;
        let format = supported.sample_format();
        let config = supported.config();
        if !is_convertible(format) {
            return Err(CaptureError::Format {
                device: id,
                format: format.to_string(),
            });
        }
        let resampler =
            Resampler::new(config.sample_rate, SAMPLE_RATE).map_err(|e| CaptureError::Open {
                device: id.clone(),
                message: e.to_string(),
                available: input_names(&host),
            })?;
        self.skip_lost_time();
        let mut converter = Converter {
            channels: usize::from(config.channels.max(1)),
            resampler,
            pending: Vec::with_capacity(FRAME_SAMPLES * 8),
            frames: self.frames.clone(),
            shared: self.shared.clone(),
        };
        let (errors, error_rx) = mpsc::sync_channel(8);
        let xruns = Arc::new(AtomicU64::new(0));
        let stream = device
            .build_input_stream_raw(
                config,
                format,
                move |data: &cpal::Data, _: &cpal::InputCallbackInfo| converter.push(data),
                stream_errors(errors, xruns.clone()),
                None,
            )
            .map_err(open_err)?;
        stream.play().map_err(open_err)?;
        let described = format!(
            "{} Hz, {} ch, {format}",
            config.sample_rate, config.channels
        );
        tracing::info!(device = %id, format = %described, "audio input open");
        self.opened += 1;
        *lock(&self.status) = CaptureStatus::Running {
            device: id.clone(),
            format: described,
            opened: self.opened,
        };
        Ok(OpenStream {
            _stream: stream,
            errors: error_rx,
            xruns,
            device: id,
        })
    }

    /// Moves the positions on by the audio lost since a stream last delivered (at least
    /// one frame), so that what comes next is not taken to follow it: the pre-roll drops
    /// what it held, and times measured across the gap stay true. Counted up to now, so
    /// an open that fails after this does not count the same time twice.
    fn skip_lost_time(&mut self) {
        let Some(heard_at) = self.heard_at else {
            return;
        };
        let now = Instant::now();
        let lost = (now.duration_since(heard_at).as_secs_f64() * f64::from(SAMPLE_RATE)) as u64;
        let frames = lost.div_ceil(FRAME_SAMPLES as u64).max(1);
        self.shared
            .position
            .fetch_add(frames * FRAME_SAMPLES as u64, Ordering::Relaxed);
        self.heard_at = Some(now);
    }

    /// The device's default configuration, with the configured rate, channels and format
    /// in place of its own where they are set.
    fn choose_config(&self, device: &cpal::Device) -> Result<cpal::SupportedStreamConfig, String> {
        let s = &self.settings;
        let default = device.default_input_config().map_err(|e| e.to_string())?;
        if s.rate.is_none() && s.channels.is_none() && s.format.is_none() {
            return Ok(default);
        }
        let rate = s.rate.unwrap_or(default.sample_rate());
        let channels = s.channels.unwrap_or(default.channels());
        let format = s.format.unwrap_or(default.sample_format());
        let ranges: Vec<_> = device
            .supported_input_configs()
            .map_err(|e| e.to_string())?
            .collect();
        ranges
            .iter()
            .filter(|r| r.channels() == channels && r.sample_format() == format)
            .find_map(|r| r.try_with_sample_rate(rate))
            .ok_or_else(|| {
                format!(
                    "it cannot capture {rate} Hz, {channels} channel(s), {format} (see `strawberry-spoke audio devices` for what it can; unset audio.input_rate/input_channels/input_format for its default)"
                )
            })
    }

    /// Watches a running stream until it fails, stalls, runs far ahead of the clock, or
    /// the capture is stopped.
    fn pump(&mut self, open: OpenStream) -> Ended {
        let tick = Duration::from_millis(100);
        let first = self.shared.frames.load(Ordering::Relaxed);
        let mut seen = first;
        let opened_at = Instant::now();
        let mut last_audio = opened_at;
        let mut pace = Pace::default();
        let mut watched_at = opened_at;
        let mut overruns = XrunReport::default();
        let report = |overruns: &mut XrunReport, force: bool| {
            let count = open.xruns.load(Ordering::Relaxed);
            if let Some(lost) = overruns.due(count, Instant::now(), force) {
                tracing::warn!(
                    device = %open.device,
                    overruns = lost,
                    "audio input overruns: sound from the microphone was lost because the board was too busy to read it in time; a command may be misheard"
                );
            }
        };
        let ended = loop {
            report(&mut overruns, false);
            match self.stop.recv_timeout(tick) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => break Ended::Stopped,
            }
            if self.shared.consumer_gone.load(Ordering::Relaxed) {
                break Ended::Stopped;
            }
            if let Ok(message) = open.errors.try_recv() {
                break Ended::Failed(CaptureError::Stream {
                    device: open.device.clone(),
                    message,
                });
            }
            let now = self.shared.frames.load(Ordering::Relaxed);
            let watched = Instant::now();
            if !pace.keeps_time(frames_to_time(now - seen), watched - watched_at) {
                break Ended::Failed(CaptureError::Unpaced {
                    device: open.device.clone(),
                    audio: frames_to_time(now - first),
                    wall: watched - opened_at,
                });
            }
            watched_at = watched;
            if now != seen {
                seen = now;
                last_audio = watched;
                self.heard_at = Some(last_audio);
            } else if last_audio.elapsed() >= self.settings.stall_timeout {
                break Ended::Failed(CaptureError::Stalled {
                    device: open.device.clone(),
                    after: self.settings.stall_timeout,
                });
            }
        };
        report(&mut overruns, true);
        ended
    }
}

/// The audio in `frames` frames.
fn frames_to_time(frames: u64) -> Duration {
    Duration::from_secs_f64(frames as f64 * FRAME_SAMPLES as f64 / f64::from(SAMPLE_RATE))
}

/// How far a stream has run ahead of the clock: the audio it delivered, less
/// [`AHEAD_DRAIN`] times the time that passed, never below nothing.
#[derive(Debug, Default)]
struct Pace {
    ahead: f64,
}

impl Pace {
    /// Counts `audio` delivered over `elapsed`; false once the lead passes
    /// [`AHEAD_LIMIT`].
    fn keeps_time(&mut self, audio: Duration, elapsed: Duration) -> bool {
        self.ahead =
            (self.ahead + audio.as_secs_f64() - AHEAD_DRAIN * elapsed.as_secs_f64()).max(0.0);
        self.ahead <= AHEAD_LIMIT.as_secs_f64()
    }
}

struct OpenStream {
    _stream: cpal::Stream,
    errors: Receiver<String>,
    /// Overruns counted by the stream's error callback.
    xruns: Arc<AtomicU64>,
    device: String,
}

/// `retry_min * 2^(attempts-1)`, at most `retry_max`.
fn backoff(settings: &CaptureSettings, attempts: u32) -> Duration {
    let factor = 1u32 << attempts.saturating_sub(1).min(16);
    settings
        .retry_min
        .saturating_mul(factor)
        .min(settings.retry_max)
}

/// The input named `name` (its id, or its description's name), or the default one.
pub(crate) fn find_input(host: &cpal::Host, name: &str) -> Result<cpal::Device, CaptureError> {
    if name.is_empty() {
        return host
            .default_input_device()
            .ok_or_else(|| CaptureError::NoDefault {
                available: input_names(host),
            });
    }
    if let Some(device) = find_named(host, name, host.input_devices().ok()) {
        return Ok(device);
    }
    Err(CaptureError::NotFound {
        name: name.into(),
        available: input_names(host),
    })
}

/// A stream's error callback: over- and underruns are counted in `xruns` (a busy
/// moment, not a broken device; the thread that owns the stream reports them, see
/// [`XrunReport`]); anything else goes to that thread as a failure.
pub(crate) fn stream_errors(
    errors: SyncSender<String>,
    xruns: Arc<AtomicU64>,
) -> impl FnMut(cpal::Error) + Send + 'static {
    move |error: cpal::Error| {
        if error.kind() == cpal::ErrorKind::Xrun {
            xruns.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("audio xrun: {error}");
            return;
        }
        let _ = errors.try_send(error.to_string());
    }
}

/// How often at most a stream's over- or underruns are reported at warn level.
pub(crate) const XRUN_REPORT_EVERY: Duration = Duration::from_secs(60);

/// Turns a stream's running count of over- or underruns into warnings a person sees at
/// the default log level: lost or cut audio on a busy board explains a garbled reply or
/// a missed command, but one line per xrun would flood the journal.
#[derive(Debug, Default)]
pub(crate) struct XrunReport {
    reported: u64,
    last: Option<Instant>,
}

impl XrunReport {
    /// The xruns to report now, given the stream's count: those since the last report,
    /// when there are any and the last report is [`XRUN_REPORT_EVERY`] old (or `force`,
    /// when the stream is closing).
    pub(crate) fn due(&mut self, count: u64, now: Instant, force: bool) -> Option<u64> {
        let new = count.saturating_sub(self.reported);
        let quiet = self
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= XRUN_REPORT_EVERY);
        (new > 0 && (quiet || force)).then(|| {
            self.reported = count;
            self.last = Some(now);
            new
        })
    }
}

/// The device called `name` (its id, or its description's name) among `listed`, or
/// one the host opens by that id: names a host does not list (ALSA's `plughw:1,0`,
/// say) may still open. Shared by the microphone and the speaker.
pub(crate) fn find_named(
    host: &cpal::Host,
    name: &str,
    listed: Option<impl Iterator<Item = cpal::Device>>,
) -> Option<cpal::Device> {
    let named = |device: &cpal::Device| {
        device.id().is_ok_and(|id| id.id() == name)
            || device.description().is_ok_and(|d| d.name() == name)
    };
    listed
        .and_then(|mut devices| devices.find(named))
        .or_else(|| host.device_by_id(&cpal::DeviceId::new(host.id(), name)))
}

/// The ids of the inputs the host lists, for error messages.
pub(crate) fn input_names(host: &cpal::Host) -> Vec<String> {
    host.input_devices()
        .map(|devices| devices.map(|d| device_id(&d)).collect())
        .unwrap_or_default()
}

/// A device's id (its ALSA PCM name), or its display name when it has none.
pub(crate) fn device_id(device: &cpal::Device) -> String {
    device
        .id()
        .map(|id| id.id().to_string())
        .unwrap_or_else(|_| device.to_string())
}

fn is_convertible(format: cpal::SampleFormat) -> bool {
    use cpal::SampleFormat as F;
    matches!(
        format,
        F::I8
            | F::I16
            | F::I24
            | F::I32
            | F::I64
            | F::U8
            | F::U16
            | F::U24
            | F::U32
            | F::U64
            | F::F32
            | F::F64
    )
}

/// Interleaved samples of any supported format, mixed to mono f32.
fn to_mono_f32(data: &cpal::Data, channels: usize) -> Option<Vec<f32>> {
    use cpal::{I24, Sample, SampleFormat as F, U24};
    fn mix<T: Sample>(samples: &[T], channels: usize) -> Vec<f32>
    where
        f32: cpal::FromSample<T>,
    {
        let scale = 1.0 / channels as f32;
        samples
            .chunks_exact(channels)
            .map(|frame| frame.iter().map(|s| s.to_sample::<f32>()).sum::<f32>() * scale)
            .collect()
    }
    Some(match data.sample_format() {
        F::I8 => mix(data.as_slice::<i8>()?, channels),
        F::I16 => mix(data.as_slice::<i16>()?, channels),
        F::I24 => mix(data.as_slice::<I24>()?, channels),
        F::I32 => mix(data.as_slice::<i32>()?, channels),
        F::I64 => mix(data.as_slice::<i64>()?, channels),
        F::U8 => mix(data.as_slice::<u8>()?, channels),
        F::U16 => mix(data.as_slice::<u16>()?, channels),
        F::U24 => mix(data.as_slice::<U24>()?, channels),
        F::U32 => mix(data.as_slice::<u32>()?, channels),
        F::U64 => mix(data.as_slice::<u64>()?, channels),
        F::F32 => mix(data.as_slice::<f32>()?, channels),
        F::F64 => mix(data.as_slice::<f64>()?, channels),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xruns_are_reported_at_most_once_a_minute_and_when_the_stream_closes() {
        let start = Instant::now();
        let mut report = XrunReport::default();
        assert_eq!(report.due(0, start, false), None);
        // The first ones at once, with their number.
        assert_eq!(report.due(3, start, false), Some(3));
        // More within the minute wait, and are not lost.
        let later = start + Duration::from_secs(10);
        assert_eq!(report.due(5, later, false), None);
        assert_eq!(report.due(7, start + XRUN_REPORT_EVERY, false), Some(4));
        // Nothing new: nothing to say, however long it has been.
        assert_eq!(report.due(7, start + XRUN_REPORT_EVERY * 5, false), None);
        // A closing stream says what it has not said yet.
        let closing = start + XRUN_REPORT_EVERY + Duration::from_secs(1);
        assert_eq!(report.due(9, closing, true), Some(2));
    }

    #[test]
    fn a_stream_far_ahead_of_the_clock_does_not_keep_time() {
        let ms = Duration::from_millis;
        let mut pace = Pace::default();
        // A microphone's buffer at once when it opens, then real time for a day with
        // its clock 0.5% fast.
        assert!(pace.keeps_time(ms(2000), ms(100)));
        for _ in 0..864_000 {
            assert!(pace.keeps_time(ms(100) + ms(100) / 200, ms(100)));
        }
        // A device no clock paces: seconds of sound per tick.
        let mut flood = Pace::default();
        assert!(flood.keeps_time(ms(3000), ms(100)));
        assert!(!flood.keeps_time(ms(3000), ms(100)));
        // Twice real time is not a microphone either; it takes about ten seconds to tell.
        let mut fast = Pace::default();
        let ticks = (1..).find(|_| !fast.keeps_time(ms(200), ms(100))).unwrap();
        assert!((100..=101).contains(&ticks), "{ticks}");
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let s = CaptureSettings {
            retry_min: Duration::from_millis(100),
            retry_max: Duration::from_millis(1000),
            ..CaptureSettings::default()
        };
        let waits: Vec<u128> = (1..=6).map(|a| backoff(&s, a).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff(&s, u32::MAX), Duration::from_millis(1000));
    }

    #[test]
    fn stereo_integers_are_mixed_to_mono_floats() {
        let samples: [i16; 4] = [16384, 0, -32768, -32768];
        let data = unsafe_free_data(&samples);
        let mono = to_mono_f32(&data, 2).unwrap();
        assert_eq!(mono, [0.25, -1.0]);
    }

    fn unsafe_free_data(samples: &[i16]) -> cpal::Data {
        // cpal::Data only borrows raw memory through an unsafe constructor; build it
        // from a slice the test owns for the duration of the call.
        let ptr = samples.as_ptr() as *mut ();
        // SAFETY: `samples` outlives the returned Data within the test, and the length
        // and format describe it exactly.
        unsafe { cpal::Data::from_parts(ptr, samples.len(), cpal::SampleFormat::I16) }
    }
}
