//! The microphone: one thread owns the cpal input stream and turns whatever the device
//! delivers into 16 kHz mono [`Frame`]s on a channel.
//!
//! Why a thread of its own: cpal's callback runs on the audio thread and must never
//! block, so it only converts samples to f32, mixes them to mono and `try_send`s them
//! (dropping, with a count, if the owner falls behind). The owner thread resamples,
//! cuts frames, and handles the device's life: a device that is missing, fails to open,
//! errors mid-stream or stops delivering is logged once per attempt with the inputs that
//! do exist, and reopened after a backoff that doubles up to a cap. Nothing here panics
//! on what the device does; the consumer just sees no frames for a while.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};

use super::resample::Resampler;
use super::{FRAME_SAMPLES, Frame, SAMPLE_RATE};

/// Chunks the callback may queue for the owner (~1-2 s at typical period sizes).
const CALLBACK_QUEUE: usize = 128;

/// Frames queued for the consumer (5 s): beyond this frames are dropped, not hoarded.
const FRAME_QUEUE: usize = 250;

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
}

impl Default for CaptureSettings {
    fn default() -> Self {
        CaptureSettings {
            input: String::new(),
            retry_min: Duration::from_millis(500),
            retry_max: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(3),
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
    NotFound { name: String, available: Vec<String> },
    /// There is no default input.
    #[error("no default audio input; inputs here: {}; set audio.input", list(available))]
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
    #[error("audio input {device:?} failed: {message}")]
    Stream { device: String, message: String },
    /// The stream stopped delivering audio.
    #[error("audio input {device:?} delivered nothing for {after:?}")]
    Stalled { device: String, after: Duration },
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
}

impl Capture {
    /// Starts the capture thread. It never fails for device reasons: those are logged
    /// and retried (see [`Capture::status`]); only a thread that cannot start is an error.
    pub fn start(settings: CaptureSettings) -> std::io::Result<Capture> {
        let (frame_tx, frames) = mpsc::sync_channel(FRAME_QUEUE);
        let (stop_tx, stop_rx) = mpsc::sync_channel(1);
        let status = Arc::new(Mutex::new(CaptureStatus::Starting));
        let owner = Owner {
            settings,
            frames: frame_tx,
            stop: stop_rx,
            status: status.clone(),
            position: 0,
        };
        let thread = std::thread::Builder::new()
            .name("audio-capture".into())
            .spawn(move || owner.run())?;
        Ok(Capture {
            frames,
            status,
            stop: Some(stop_tx),
            thread: Some(thread),
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
        // Dropping the sender wakes the owner wherever it waits.
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(status: &Mutex<CaptureStatus>) -> std::sync::MutexGuard<'_, CaptureStatus> {
    status.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the callback hands the owner.
enum Chunk {
    Samples(Vec<f32>),
    Error(String),
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
    /// 16 kHz samples delivered so far (plus gaps).
    position: u64,
}

impl Owner {
    fn run(mut self) {
        let mut attempts = 0u32;
        loop {
            let error = match self.open() {
                Ok(open) => {
                    attempts = 0;
                    match self.pump(open) {
                        Ended::Stopped => return,
                        Ended::Failed(error) => error,
                    }
                }
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

    fn open(&self) -> Result<OpenStream, CaptureError> {
        let host = cpal::default_host();
        let device = find_input(&host, &self.settings.input)?;
        let id = device_id(&device);
        let open_err = |e: cpal::Error| CaptureError::Open {
            device: id.clone(),
            message: e.to_string(),
            available: input_names(&host),
        };
        let supported = device.default_input_config().map_err(open_err)?;
        let format = supported.sample_format();
        let config = supported.config();
        let channels = usize::from(config.channels.max(1));
        let (tx, rx) = mpsc::sync_channel(CALLBACK_QUEUE);
        let errors = tx.clone();
        let mut dropped = 0u64;
        let stream = device
            .build_input_stream_raw(
                config,
                format,
                move |data: &cpal::Data, _: &cpal::InputCallbackInfo| {
                    let Some(mono) = to_mono_f32(data, channels) else {
                        return;
                    };
                    if let Err(TrySendError::Full(_)) = tx.try_send(Chunk::Samples(mono)) {
                        // The owner is behind; never block the audio thread.
                        dropped += 1;
                        if dropped.is_power_of_two() {
                            tracing::warn!(dropped, "audio capture falling behind: chunks dropped");
                        }
                    }
                },
                move |error: cpal::Error| {
                    if error.kind() == cpal::ErrorKind::Xrun {
                        tracing::debug!("audio input overrun: {error}");
                        return;
                    }
                    let _ = errors.try_send(Chunk::Error(error.to_string()));
                },
                None,
            )
            .map_err(open_err)?;
        if !is_convertible(format) {
            return Err(CaptureError::Format {
                device: id,
                format: format.to_string(),
            });
        }
        stream.play().map_err(open_err)?;
        let described = format!("{} Hz, {} ch, {format}", config.sample_rate, config.channels);
        tracing::info!(device = %id, format = %described, "audio input open");
        *lock(&self.status) = CaptureStatus::Running {
            device: id.clone(),
            format: described,
        };
        Ok(OpenStream {
            _stream: stream,
            chunks: rx,
            rate: config.sample_rate,
            device: id,
        })
    }

    /// Moves audio from the stream to the consumer until the stream fails or stop.
    fn pump(&mut self, open: OpenStream) -> Ended {
        let mut resampler = Resampler::new(open.rate, SAMPLE_RATE);
        let mut pending: Vec<f32> = Vec::with_capacity(FRAME_SAMPLES * 4);
        let mut last_audio = Instant::now();
        let mut lost = 0u64;
        let tick = Duration::from_millis(100);
        loop {
            match self.stop.try_recv() {
                Err(mpsc::TryRecvError::Empty) => {}
                _ => return Ended::Stopped,
            }
            match open.chunks.recv_timeout(tick) {
                Ok(Chunk::Samples(mono)) => {
                    last_audio = Instant::now();
                    resampler.push(&mono, &mut pending);
                    let whole = pending.len() / FRAME_SAMPLES * FRAME_SAMPLES;
                    for samples in pending.drain(..whole).collect::<Vec<_>>().chunks(FRAME_SAMPLES)
                    {
                        let frame = Frame {
                            start: self.position,
                            samples: samples.to_vec(),
                        };
                        self.position += FRAME_SAMPLES as u64;
                        match self.frames.try_send(frame) {
                            Ok(()) => {}
                            Err(TrySendError::Full(_)) => {
                                lost += 1;
                                if lost.is_power_of_two() {
                                    tracing::warn!(lost, "audio consumer falling behind: frames dropped");
                                }
                            }
                            Err(TrySendError::Disconnected(_)) => return Ended::Stopped,
                        }
                    }
                }
                Ok(Chunk::Error(message)) => {
                    return Ended::Failed(CaptureError::Stream {
                        device: open.device,
                        message,
                    });
                }
                Err(RecvTimeoutError::Timeout) => {
                    if last_audio.elapsed() >= self.settings.stall_timeout {
                        return Ended::Failed(CaptureError::Stalled {
                            device: open.device,
                            after: self.settings.stall_timeout,
                        });
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Ended::Failed(CaptureError::Stream {
                        device: open.device,
                        message: "the stream closed".into(),
                    });
                }
            }
        }
    }
}

struct OpenStream {
    _stream: cpal::Stream,
    chunks: Receiver<Chunk>,
    rate: u32,
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
        return host.default_input_device().ok_or_else(|| CaptureError::NoDefault {
            available: input_names(host),
        });
    }
    if let Ok(devices) = host.input_devices() {
        for device in devices {
            let id_matches = device.id().is_ok_and(|id| id.id() == name);
            let name_matches = device.description().is_ok_and(|d| d.name() == name);
            if id_matches || name_matches {
                return Ok(device);
            }
        }
    }
    // Names a host does not list (ALSA's `plughw:1,0`, say) may still open.
    if let Some(device) = host.device_by_id(&cpal::DeviceId::new(host.id(), name)) {
        return Ok(device);
    }
    Err(CaptureError::NotFound {
        name: name.into(),
        available: input_names(host),
    })
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
        F::I8 | F::I16 | F::I24 | F::I32 | F::I64 | F::U8 | F::U16 | F::U24 | F::U32 | F::U64
            | F::F32 | F::F64
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
