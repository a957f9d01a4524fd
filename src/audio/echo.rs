//! Echo cancellation: what the speaker plays is taken out of what the microphone hears,
//! before the wake word, the end-of-speech detector and Whisper see it.
//!
//! Why in-process: the spoke owns its playback, so the exact samples it plays (replies,
//! cues, rings, announcements) are at hand as the canceller's reference; a sound server's
//! canceller (PipeWire's echo-cancel module) only sees what passes through it. The
//! canceller is WebRTC's AEC3, the one browsers and PipeWire use, in `sonora`'s pure-Rust
//! port of WebRTC's audio processing module: it finds the delay between playing and
//! hearing itself (ALSA buffers and the room differ per board) and follows it when it
//! changes, so no delay is configured or assumed here. Why the port and not WebRTC's C++
//! (the `webrtc-audio-processing` crate): measured against it in one run on the same
//! simulated rooms it removes as much echo and keeps the wake word as well
//! (BENCHMARKS.md, "Echo cancellation"), and it builds with cargo alone, for aarch64 too,
//! where the C++ needs meson, a newer abseil than Debian 12's and a cross file. The C++
//! stays available as the benchmark's peer behind the `webrtc-aec` feature ([`Engine`]).
//!
//! Why AEC3 is driven here block by block ([`Engine::Aec3`], `sonora-aec3`) and not through
//! sonora's AudioProcessing: that builds AEC3 with WebRTC's default configuration and no way
//! to change it, and the default is made for calls, where losing some of the far talker's
//! words while both talk is the price of never hearing an echo. For a spoke it is the wrong
//! price: "hey strawberry" said over a reply must get through. In the echo benchmark
//! (simulated rooms, phrase 10 dB below the echo) the default's residual echo suppressor took
//! most of the phrase: the neural wake word found 5 of 64 phrases said during a reply, the
//! reference word half. [`barge_in_config`] (a longer linear filter, trusting what it
//! removes, a near-end detector that lets the person through sooner) finds far more with no
//! wake on 40 replies alone, for less echo removed; the figures are in BENCHMARKS.md, "Echo
//! cancellation". The wrapper only feeds AEC3 as sonora does at 16 kHz (one band: the
//! high-pass filter before it, 16-bit full scale, 4 ms blocks); AEC3 is the library's.
//!
//! How the two sides meet: the speaker's callback hands each buffer it writes (mono, at
//! the device's rate, silence included) to a [`Reference`], a bounded channel it only
//! `try_send`s to, so playback never waits on the capture side; a full channel drops the
//! buffer and counts it. The [`Canceller`] lives on the thread that reads capture frames:
//! it drains the channel, converts to 16 kHz, and feeds AEC3 one 10 ms render block per
//! 10 ms capture block, as the two streams run at the same pace. What was played but not
//! yet paired waits (at most [`MAX_PENDING_MS`]); when nothing is playing, silence is the
//! reference, so AEC3's render stream stays continuous and its delay estimate survives
//! between replies.
//!
//! Until AEC3 has first locked onto the echo, the microphone is passed on as heard (AEC3 still
//! sees both streams). Before it locks, its residual echo suppressor assumes an echo of a default
//! strength wherever something plays and can take the person's speech with it: in one run of the
//! daemon's test harness (whose microphone never hears its speaker), the follow-up "Yes, please."
//! said just after a reply was misheard with the canceller's output used from the start, and heard
//! with it passed on as heard (one run each, with WebRTC's C++ AEC3). It locks within a few seconds
//! of the first audible reply in a simulated room (BENCHMARKS.md), and stays locked.
//!
//! It cannot work without a reference that matches what the microphone hears: played
//! audio lost on the way ([`EchoHealth::ReferenceLost`]) or a reply played for a while
//! with no delay found ([`EchoHealth::DelayNotFound`], e.g. the speaker is not in
//! earshot of the microphone, or the output is not the configured one). Both are logged
//! and shown in the systemd status rather than passed through silently.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};

use sonora::config::{
    AdaptiveDigital, EchoCanceller, GainController2, HighPassFilter, NoiseSuppression,
};
use sonora::{AudioProcessing, StreamConfig};
use sonora_aec3::block::Block;
use sonora_aec3::block_framer::BlockFramer;
use sonora_aec3::block_processor::BlockProcessor;
use sonora_aec3::common::SUB_FRAME_LENGTH;
use sonora_aec3::config::EchoCanceller3Config;
use sonora_aec3::frame_blocker::FrameBlocker;

use super::resample::{RateError, Resampler};
use super::{Frame, SAMPLE_RATE};

/// Samples in one AEC3 block: 10 ms at 16 kHz.
pub const BLOCK: usize = SAMPLE_RATE as usize / 100;

/// Speaker buffers queued between the two sides. A callback hands over 5-50 ms, so this
/// is several seconds: only a capture side that has stopped reading fills it.
const PLAYED_QUEUE: usize = 512;

/// Played audio kept waiting for the capture it belongs with. More than this means the
/// two sides have drifted apart (a stalled capture); the oldest is dropped.
pub const MAX_PENDING_MS: usize = 1_000;

/// Audible playback after which AEC3 should have found the delay (it takes a few seconds).
pub const FIND_DELAY_MS: u64 = 8_000;

/// Echo return loss enhancement (dB) above which AEC3's filter has locked on.
const LOCKED_ERLE_DB: f64 = 1.0;

/// A played block quieter than this (RMS, full scale 1) is silence for the health check.
const AUDIBLE_RMS: f32 = 0.003;
/// How long after audible played sound its echo may still be heard: the play-to-hear
/// delay AEC3 follows (up to a few hundred ms of ALSA buffers) and a room's reverberant tail.
const ECHO_TAIL_MS: u64 = 500;

/// Why the canceller could not be made or could not process.
#[derive(Debug, thiserror::Error)]
pub enum EchoError {
    /// AEC3 rejected a block.
    #[error("the echo canceller failed on a block of audio: {0}; that block is passed on as heard")]
    Process(#[source] sonora::Error),
    /// WebRTC's C++ AEC3 could not be created.
    #[cfg(feature = "webrtc-aec")]
    #[error(
        "the echo canceller (WebRTC AEC3, C++) cannot start: {0}; the spoke will hear itself while it talks (set audio.echo_cancel = false to run without it and silence this)"
    )]
    WebRtcCreate(#[source] webrtc_audio_processing::Error),
    /// WebRTC's C++ AEC3 rejected a block.
    #[cfg(feature = "webrtc-aec")]
    #[error("the echo canceller failed on a block of audio: {0}; that block is passed on as heard")]
    WebRtcProcess(#[source] webrtc_audio_processing::Error),
    /// The speaker's rate cannot be converted to 16 kHz.
    #[error("the speaker's rate cannot be used as the echo canceller's reference: {0}")]
    Rate(#[from] RateError),
}

/// Whether the canceller is doing its job, for the log and the systemd status.
#[derive(Debug, Clone, PartialEq)]
pub enum EchoHealth {
    /// Nothing has been played yet.
    Idle,
    /// Playing; the delay is not found yet.
    Searching,
    /// The delay is found and the echo is being taken out.
    Cancelling {
        /// Play-to-hear delay AEC3 estimates, in ms.
        delay_ms: u32,
    },
    /// Audio was played for a while and AEC3 found no delay: the microphone does not
    /// hear the reference (wrong output, or a speaker out of earshot).
    DelayNotFound,
    /// Played audio did not reach the canceller (the capture side fell behind).
    ReferenceLost {
        /// Speaker buffers dropped so far.
        buffers: u64,
    },
}

impl EchoHealth {
    /// A line for the systemd status when the canceller cannot work; `None` while it can.
    pub fn note(&self) -> Option<String> {
        match self {
            EchoHealth::DelayNotFound => Some(
                "Echo canceller found no delay between speaker and microphone: the spoke may hear itself (is audio.output the speaker next to this microphone?)".into(),
            ),
            EchoHealth::ReferenceLost { buffers } => Some(format!(
                "Echo canceller lost {buffers} speaker buffers: the spoke may hear itself (the board is too busy)"
            )),
            _ => None,
        }
    }
}

/// What the canceller reports, for logs, tests and benchmarks.
#[derive(Debug, Clone, PartialEq)]
pub struct EchoStats {
    /// Play-to-hear delay AEC3 estimates, in ms, once found.
    pub delay_ms: Option<u32>,
    /// Echo return loss enhancement (how much quieter the echo is after), in dB.
    pub erle_db: Option<f64>,
    /// Echo return loss (how much quieter the echo is than what was played), in dB.
    pub erl_db: Option<f64>,
    /// Health, as in [`EchoHealth`].
    pub health: EchoHealth,
}

/// Which implementation of AEC3 does the work.
#[derive(Debug, Clone)]
pub enum Engine {
    /// `sonora`'s AudioProcessing, the pure-Rust port with AEC3's default configuration.
    Sonora,
    /// The same port's AEC3 driven block by block with `config`.
    Aec3 {
        /// AEC3's configuration.
        config: Box<EchoCanceller3Config>,
        /// What comes out: the linear filter's output (`true`, before the residual echo
        /// suppressor) or the suppressor's (`false`).
        linear: bool,
    },
    /// WebRTC's C++ through `webrtc-audio-processing` (bundled build; needs meson and
    /// abseil, see packaging/webrtc-deps.sh): the benchmark's peer.
    #[cfg(feature = "webrtc-aec")]
    WebRtc,
}

/// What else of WebRTC's audio processing runs on the capture path after AEC3 (sonora's
/// engines only). Neither is on in the daemon: see BENCHMARKS.md for what each did to the
/// wake word in the echo benchmark.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Extras {
    /// WebRTC's noise suppression (moderate).
    pub noise_suppression: bool,
    /// WebRTC's AGC2, adaptive digital gain.
    pub gain_control: bool,
}

/// An AEC3 instance of either engine, 16 kHz mono, with the high-pass filter AEC3 expects.
enum Processor {
    Sonora(Box<AudioProcessing>),
    Aec3(Box<Aec3>),
    #[cfg(feature = "webrtc-aec")]
    WebRtc(Box<webrtc_audio_processing::Processor>),
}

impl Processor {
    fn new(engine: Engine, extras: Extras) -> Result<Processor, EchoError> {
        match engine {
            Engine::Sonora => {
                let stream = StreamConfig::new(SAMPLE_RATE, 1);
                Ok(Processor::Sonora(Box::new(
                    AudioProcessing::builder()
                        .config(sonora::Config {
                            echo_canceller: Some(EchoCanceller::default()),
                            high_pass_filter: Some(HighPassFilter::default()),
                            noise_suppression: extras
                                .noise_suppression
                                .then(NoiseSuppression::default),
                            gain_controller2: extras.gain_control.then(|| GainController2 {
                                adaptive_digital: Some(AdaptiveDigital::default()),
                                ..GainController2::default()
                            }),
                            ..sonora::Config::default()
                        })
                        .capture_config(stream)
                        .render_config(stream)
                        .build(),
                )))
            }
            Engine::Aec3 { config, linear } => Ok(Processor::Aec3(Box::new(Aec3::new(
                &config, linear, extras,
            )))),
            #[cfg(feature = "webrtc-aec")]
            Engine::WebRtc => {
                use webrtc_audio_processing::config as w;
                let processor = webrtc_audio_processing::Processor::new(SAMPLE_RATE)
                    .map_err(EchoError::WebRtcCreate)?;
                processor.set_config(w::Config {
                    echo_canceller: Some(w::EchoCanceller::Full {
                        stream_delay_ms: None,
                    }),
                    high_pass_filter: Some(w::HighPassFilter::default()),
                    ..w::Config::default()
                });
                Ok(Processor::WebRtc(Box::new(processor)))
            }
        }
    }

    /// One 10 ms block played (`render`), then one heard (`heard`), cleaned into `out`.
    fn block(
        &mut self,
        render: &[f32; BLOCK],
        heard: &[f32; BLOCK],
        out: &mut [f32],
    ) -> Result<(), EchoError> {
        match self {
            Processor::Sonora(apm) => {
                // The render side's output is not used: nothing processes what is played.
                let mut played = [0.0f32; BLOCK];
                apm.process_render_f32(&[&render[..]], &mut [&mut played[..]])
                    .map_err(EchoError::Process)?;
                apm.process_capture_f32(&[&heard[..]], &mut [out])
                    .map_err(EchoError::Process)
            }
            Processor::Aec3(aec3) => aec3.block(render, heard, out),
            #[cfg(feature = "webrtc-aec")]
            Processor::WebRtc(processor) => {
                let mut render = *render;
                processor
                    .process_render_frame([&mut render[..]])
                    .map_err(EchoError::WebRtcProcess)?;
                out.copy_from_slice(heard);
                processor
                    .process_capture_frame([out])
                    .map_err(EchoError::WebRtcProcess)
            }
        }
    }

    /// Whether the linear filter's output comes out (AEC3 driven here only: the others
    /// have no such output).
    fn set_linear(&mut self, linear: bool) {
        if let Processor::Aec3(aec3) = self {
            aec3.linear = linear;
        }
    }

    /// Delay (ms), echo return loss enhancement and echo return loss (dB).
    fn stats(&self) -> (Option<u32>, Option<f64>, Option<f64>) {
        match self {
            Processor::Sonora(apm) => {
                let stats = apm.statistics();
                (
                    stats.delay_ms.and_then(|d| u32::try_from(d).ok()),
                    stats.echo_return_loss_enhancement,
                    stats.echo_return_loss,
                )
            }
            Processor::Aec3(aec3) => aec3.stats(),
            #[cfg(feature = "webrtc-aec")]
            Processor::WebRtc(processor) => {
                let stats = processor.get_stats();
                (
                    stats.delay_ms,
                    stats.echo_return_loss_enhancement,
                    stats.echo_return_loss,
                )
            }
        }
    }
}

/// AEC3 fed as sonora's AudioProcessing feeds it at 16 kHz (one band, so no band split):
/// the capture high-pass filtered, both sides scaled to 16-bit full scale, each 10 ms
/// block cut into AEC3's 4 ms blocks and put back together; the render side has no filter
/// (AEC3's default). The high-pass filter and the extras are an AudioProcessing of their
/// own, without its echo canceller.
struct Aec3 {
    processor: BlockProcessor,
    /// High-pass filter before AEC3; noise suppression and AGC2 after, when asked for.
    before: Box<AudioProcessing>,
    after: Option<Box<AudioProcessing>>,
    linear: bool,
    render_blocker: FrameBlocker,
    capture_blocker: FrameBlocker,
    framer: BlockFramer,
    linear_framer: BlockFramer,
    render_block: Block,
    capture_block: Block,
    linear_block: Block,
    /// One 80-sample half of a 10 ms block, as AEC3's blockers take it.
    sub_frame: Vec<Vec<Vec<f32>>>,
    linear_sub_frame: Vec<Vec<Vec<f32>>>,
}

/// AEC3 works on samples at 16-bit full scale.
const S16: f32 = 32_768.0;

/// A microphone sample this close to 16-bit full scale counts as clipped (as in sonora).
const SATURATED: f32 = 32_700.0;

impl Aec3 {
    fn new(config: &EchoCanceller3Config, linear: bool, extras: Extras) -> Aec3 {
        let stream = StreamConfig::new(SAMPLE_RATE, 1);
        let apm = |config| {
            Box::new(
                AudioProcessing::builder()
                    .config(config)
                    .capture_config(stream)
                    .render_config(stream)
                    .build(),
            )
        };
        let before = apm(sonora::Config {
            high_pass_filter: Some(HighPassFilter::default()),
            ..sonora::Config::default()
        });
        let after = (extras != Extras::default()).then(|| {
            apm(sonora::Config {
                noise_suppression: extras.noise_suppression.then(NoiseSuppression::default),
                gain_controller2: extras.gain_control.then(|| GainController2 {
                    adaptive_digital: Some(AdaptiveDigital::default()),
                    ..GainController2::default()
                }),
                ..sonora::Config::default()
            })
        });
        // AEC3 panics on some out-of-range settings; its own check brings them into range.
        let mut config = config.clone();
        config.validate();
        Aec3 {
            processor: BlockProcessor::new(&config, SAMPLE_RATE as usize, 1, 1),
            before,
            after,
            linear,
            render_blocker: FrameBlocker::new(1, 1),
            capture_blocker: FrameBlocker::new(1, 1),
            framer: BlockFramer::new(1, 1),
            linear_framer: BlockFramer::new(1, 1),
            render_block: Block::new(1, 1),
            capture_block: Block::new(1, 1),
            linear_block: Block::new(1, 1),
            sub_frame: vec![vec![vec![0.0; SUB_FRAME_LENGTH]]],
            linear_sub_frame: vec![vec![vec![0.0; SUB_FRAME_LENGTH]]],
        }
    }

    fn block(
        &mut self,
        render: &[f32; BLOCK],
        heard: &[f32; BLOCK],
        out: &mut [f32],
    ) -> Result<(), EchoError> {
        for half in render.chunks_exact(SUB_FRAME_LENGTH) {
            let mut scaled = [0.0f32; SUB_FRAME_LENGTH];
            for (to, s) in scaled.iter_mut().zip(half) {
                *to = s * S16;
            }
            self.render_blocker
                .insert_sub_frame_and_extract_block(&[vec![&scaled[..]]], &mut self.render_block);
            self.processor.buffer_render(&self.render_block);
        }
        if self.render_blocker.is_block_available() {
            self.render_blocker.extract_block(&mut self.render_block);
            self.processor.buffer_render(&self.render_block);
        }

        let mut filtered = [0.0f32; BLOCK];
        self.before
            .process_capture_f32(&[&heard[..]], &mut [&mut filtered[..]])
            .map_err(EchoError::Process)?;
        let capture = filtered.map(|s| s * S16);
        let saturated = capture.iter().any(|s| s.abs() >= SATURATED);
        for (half, out) in capture
            .chunks_exact(SUB_FRAME_LENGTH)
            .zip(out.chunks_exact_mut(SUB_FRAME_LENGTH))
        {
            self.capture_blocker
                .insert_sub_frame_and_extract_block(&[vec![half]], &mut self.capture_block);
            self.process_capture_block(saturated);
            self.framer
                .insert_block_and_extract_sub_frame(&self.capture_block, &mut self.sub_frame);
            self.linear_framer
                .insert_block_and_extract_sub_frame(&self.linear_block, &mut self.linear_sub_frame);
            let done = if self.linear {
                &self.linear_sub_frame[0][0]
            } else {
                &self.sub_frame[0][0]
            };
            for (o, s) in out.iter_mut().zip(done) {
                *o = s / S16;
            }
        }
        if self.capture_blocker.is_block_available() {
            self.capture_blocker.extract_block(&mut self.capture_block);
            self.process_capture_block(saturated);
            self.framer.insert_block(&self.capture_block);
            self.linear_framer.insert_block(&self.linear_block);
        }
        if let Some(after) = &mut self.after {
            let mut cleaned = [0.0f32; BLOCK];
            cleaned.copy_from_slice(out);
            after
                .process_capture_f32(&[&cleaned[..]], &mut [out])
                .map_err(EchoError::Process)?;
        }
        Ok(())
    }

    /// One 4 ms block; the linear output starts as the capture, so a block AEC3 skips
    /// (nothing played yet) passes through on that side as on the other.
    fn process_capture_block(&mut self, saturated: bool) {
        self.linear_block
            .view_mut(0, 0)
            .copy_from_slice(self.capture_block.view(0, 0));
        self.processor.process_capture(
            false,
            saturated,
            Some(&mut self.linear_block),
            &mut self.capture_block,
        );
    }

    fn stats(&self) -> (Option<u32>, Option<f64>, Option<f64>) {
        let metrics = self.processor.get_metrics();
        (
            u32::try_from(metrics.delay_ms).ok(),
            Some(metrics.echo_return_loss_enhancement),
            Some(metrics.echo_return_loss),
        )
    }
}

/// AEC3's configuration in the daemon: WebRTC's default, tuned so a person speaking over
/// the reply is let through (see the module docs for why each and what it costs).
pub fn barge_in_config() -> EchoCanceller3Config {
    let mut config = EchoCanceller3Config::default();
    // A linear filter of 100 ms (25 blocks of 4 ms) instead of 52 ms, from the start:
    // a room's reverberation lasts longer than 52 ms, and what the filter cannot model
    // the suppressor has to take out, with the person's speech.
    let filter = &mut config.filter;
    filter.refined.length_blocks = 25;
    filter.coarse.length_blocks = 25;
    filter.refined_initial.length_blocks = 25;
    filter.coarse_initial.length_blocks = 25;
    // Out of the cautious initial phase after 1 s of echo instead of 2.5 s.
    filter.initial_state_seconds = 1.0;
    // Trust the linear filter's measured echo removal up to 20 dB (low) and 13 dB (high
    // frequencies) instead of 6 and 1.8 dB, so the suppressor's estimate of the echo left
    // over follows what the filter does instead of assuming the worst.
    config.erle.max_l = 100.0;
    config.erle.max_h = 20.0;
    // Switch to the suppressor's near-end tuning as soon as the person is louder than
    // the estimated echo left over (not 6 dB louder), over 6 bands (not 12) and 10 dB
    // above the noise (not 15), and stay there 400 ms (not 200).
    let nearend = &mut config.suppressor.dominant_nearend_detection;
    nearend.enr_threshold = 1.0;
    nearend.snr_threshold = 10.0;
    nearend.trigger_threshold = 6;
    nearend.hold_duration = 100;
    // In the near-end tuning, suppress only where the estimated echo left over is 3-5x
    // (low) or 1-2x (high frequencies) the person's level, not about equal to it.
    let tuning = &mut config.suppressor.nearend_tuning;
    tuning.mask_lf.enr_transparent = 3.0;
    tuning.mask_lf.enr_suppress = 5.0;
    tuning.mask_hf.enr_transparent = 1.0;
    tuning.mask_hf.enr_suppress = 2.0;
    config
}

/// One buffer the speaker wrote: mono, at the device's rate.
struct Played {
    rate: u32,
    samples: Vec<f32>,
}

/// The speaker's end: hands what it plays to the canceller without ever waiting.
#[derive(Debug, Clone)]
pub struct Reference {
    played: SyncSender<Played>,
    lost: Arc<AtomicU64>,
}

impl std::fmt::Debug for Played {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Played({} @ {} Hz)", self.samples.len(), self.rate)
    }
}

impl Reference {
    /// `samples` (mono, at `rate`) have just been written to the speaker.
    pub fn played(&self, samples: Vec<f32>, rate: u32) {
        match self.played.try_send(Played { rate, samples }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
            // The capture side is gone: nothing to cancel for.
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// The microphone's end: takes what was played out of what was heard.
pub struct Canceller {
    processor: Processor,
    played: Receiver<Played>,
    lost: Arc<AtomicU64>,
    /// The speaker's rate and the converter to 16 kHz.
    resampler: Option<(u32, Resampler)>,
    /// Played audio at 16 kHz waiting for its capture block.
    pending: VecDeque<f32>,
    converted: Vec<f32>,
    /// Audible played audio since the delay was last found (or since the start).
    audible_ms: u64,
    /// Since the last block of audible played audio, in ms.
    since_audible_ms: u64,
    /// Played audio dropped because it waited too long.
    stale: u64,
    /// Speaker buffers lost, as of the last check.
    lost_seen: u64,
    /// AEC3 has locked onto the echo at least once; until then its output is not used.
    locked: bool,
    health: EchoHealth,
}

impl std::fmt::Debug for Canceller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canceller")
            .field("health", &self.health)
            .finish_non_exhaustive()
    }
}

/// A canceller and the reference its speaker feeds.
pub fn pair() -> Result<(Reference, Canceller), EchoError> {
    pair_with(
        Engine::Aec3 {
            config: Box::new(barge_in_config()),
            linear: false,
        },
        Extras::default(),
    )
}

/// Like [`pair`] with the AEC3 of `engine` and `extras` after it (benchmarks).
pub fn pair_with(engine: Engine, extras: Extras) -> Result<(Reference, Canceller), EchoError> {
    let processor = Processor::new(engine, extras)?;
    let (tx, rx) = mpsc::sync_channel(PLAYED_QUEUE);
    let lost = Arc::new(AtomicU64::new(0));
    Ok((
        Reference {
            played: tx,
            lost: lost.clone(),
        },
        Canceller {
            processor,
            played: rx,
            lost,
            resampler: None,
            pending: VecDeque::new(),
            converted: Vec::new(),
            audible_ms: 0,
            since_audible_ms: u64::MAX,
            stale: 0,
            lost_seen: 0,
            locked: false,
            health: EchoHealth::Idle,
        },
    ))
}

impl Canceller {
    /// Takes the echo out of `frame` in place. Whole 10 ms blocks are processed; a
    /// shorter tail (only a file's last frame has one) is left as heard, and so is all of
    /// it until AEC3 has first locked onto the echo (see the module docs).
    pub fn process(&mut self, frame: &mut Frame) -> Result<(), EchoError> {
        self.take_played()?;
        for block in frame.samples.chunks_exact_mut(BLOCK) {
            let mut render = [0.0f32; BLOCK];
            if self.pending.len() >= BLOCK {
                for (r, s) in render.iter_mut().zip(self.pending.drain(..BLOCK)) {
                    *r = s;
                }
            }
            if rms(&render) >= AUDIBLE_RMS {
                self.audible_ms += 10;
                self.since_audible_ms = 0;
            } else {
                self.since_audible_ms = self.since_audible_ms.saturating_add(10);
            }
            let mut heard = [0.0f32; BLOCK];
            heard.copy_from_slice(block);
            self.processor.block(&render, &heard, block)?;
            if !self.locked {
                block.copy_from_slice(&heard);
            }
        }
        self.check();
        Ok(())
    }

    /// The microphone has delivered nothing for a while (its device is lost and being
    /// reopened): what the speaker plays meanwhile is heard by nobody, so it is dropped
    /// rather than paired with the frames that come after, and what the full queue could
    /// not take is not reported lost (the board is not too busy; the log already says the
    /// microphone stopped).
    pub fn microphone_silent(&mut self) {
        while self.played.try_recv().is_ok() {}
        self.pending.clear();
        self.lost_seen = self.lost.load(Ordering::Relaxed);
    }

    /// Hears the linear filter's output (`true`) instead of the residual echo
    /// suppressor's, until told otherwise. For a moment where every sound of the person
    /// matters more than the last of the echo: while both talk, the suppressor takes a
    /// soft consonant along with the echo ("st" of "stop" said over a ring), and the
    /// linear output keeps it, with more of the echo left in. Only the AEC3 driven here
    /// has that output; the other engines ignore this.
    pub fn set_linear(&mut self, linear: bool) {
        self.processor.set_linear(linear);
    }

    /// Whether what comes out now is the canceller's work on played sound: AEC3 has
    /// locked onto the echo and something audible was played within the echo's reach
    /// ([`ECHO_TAIL_MS`]). Then what the person says comes out with the suppressor's
    /// marks on it ([`crate::wake::Detector::set_over_echo`]).
    pub fn over_echo(&self) -> bool {
        self.locked && self.since_audible_ms <= ECHO_TAIL_MS
    }

    /// What AEC3 reports now.
    pub fn stats(&self) -> EchoStats {
        let (delay_ms, erle_db, erl_db) = self.processor.stats();
        EchoStats {
            delay_ms,
            erle_db,
            erl_db,
            health: self.health.clone(),
        }
    }

    /// Whether the canceller is doing its job.
    pub fn health(&self) -> &EchoHealth {
        &self.health
    }

    /// Moves what the speaker played into `pending`, at 16 kHz.
    fn take_played(&mut self) -> Result<(), EchoError> {
        while let Ok(played) = self.played.try_recv() {
            if self
                .resampler
                .as_ref()
                .is_none_or(|(rate, _)| *rate != played.rate)
            {
                self.resampler = Some((played.rate, Resampler::new(played.rate, SAMPLE_RATE)?));
            }
            let Some((_, resampler)) = &mut self.resampler else {
                continue;
            };
            self.converted.clear();
            resampler.push(&played.samples, &mut self.converted);
            self.pending.extend(self.converted.iter().copied());
        }
        let max = super::ms_to_samples(MAX_PENDING_MS as u64);
        if self.pending.len() > max {
            let excess = self.pending.len() - max;
            self.pending.drain(..excess);
            self.stale += 1;
            if self.stale.is_power_of_two() {
                tracing::warn!(
                    dropped_ms = excess * 1000 / SAMPLE_RATE as usize,
                    "echo canceller: played audio waited over a second for the microphone's and was dropped (the capture side is late, or the output plays faster than real time)"
                );
            }
        }
        Ok(())
    }

    /// Updates [`Canceller::health`], logging when it turns bad or recovers.
    ///
    /// AEC3 reports no "delay found" flag; what it does report is an echo return loss
    /// and enhancement that stay at their floor (-30 dB and 0 dB) until its filter has
    /// locked onto the echo, which happens within a few seconds of audible playback
    /// (BENCHMARKS.md). So enhancement above [`LOCKED_ERLE_DB`] is taken as the delay
    /// found, and [`FIND_DELAY_MS`] of audible playback without it as not found.
    fn check(&mut self) {
        let lost = self.lost.load(Ordering::Relaxed);
        let (delay_ms, erle, _) = self.processor.stats();
        let locked = erle.is_some_and(|erle| erle > LOCKED_ERLE_DB);
        let health = if lost > self.lost_seen {
            self.lost_seen = lost;
            EchoHealth::ReferenceLost { buffers: lost }
        } else if locked {
            self.locked = true;
            self.audible_ms = 0;
            EchoHealth::Cancelling {
                delay_ms: delay_ms.unwrap_or(0),
            }
        } else if self.audible_ms >= FIND_DELAY_MS {
            EchoHealth::DelayNotFound
        } else if self.audible_ms > 0 {
            EchoHealth::Searching
        } else {
            EchoHealth::Idle
        };
        if std::mem::discriminant(&health) != std::mem::discriminant(&self.health) {
            match &health {
                EchoHealth::DelayNotFound | EchoHealth::ReferenceLost { .. } => {
                    if let Some(note) = health.note() {
                        tracing::warn!("{note}");
                    }
                }
                EchoHealth::Cancelling { delay_ms } => {
                    tracing::info!(delay_ms, "echo canceller found the speaker's delay");
                }
                EchoHealth::Idle | EchoHealth::Searching => {}
            }
        }
        self.health = health;
    }
}

fn rms(x: &[f32]) -> f32 {
    (x.iter().map(|s| s * s).sum::<f32>() / x.len().max(1) as f32).sqrt()
}
