//! Neural wake words: a small keyword spotter trained on many synthetic voices and rooms
//! (`src/wake/train-neural/`), run here frame by frame.
//!
//! Why a network next to the reference words: a reference word matches voices like the
//! ones it was recorded from, and people differ from any handful of recordings more than
//! recordings differ from each other (issue 25: the bundled reference word heard 5 of 16
//! unseen synthetic voices in a quiet room). A network trained on thousands of voices,
//! rooms and noises generalises from data instead.
//!
//! The model is a causal temporal convolution over log-mel frames (40 bins, 25 ms
//! windows every 10 ms): one full convolution, then residual blocks of depthwise
//! dilated convolutions with pointwise mixing, one score per frame. Causal and dilated,
//! it streams: each 10 ms costs one column per layer, with a few past columns kept per
//! layer (its dilation's worth), and gives what the training script computes over a
//! whole clip, up to float rounding (`tests/wake.rs` compares the two on a fixed clip).
//!
//! The file: the 8 bytes `SSWAKENN`, a little-endian u32 header length, a JSON header
//! (front end, shapes, measured operating points), then the arrays it lists, f32 or, when
//! the header's `dtype` is `"f16"`, half floats (widened to f32 on loading: half the
//! bytes for a network whose scores were measured with its weights so rounded). A
//! header's `companion_bytes` says that another such file follows: a companion network
//! listening for the same phrase with its own rule, and the word fires when any of its
//! networks does, once an utterance. Why: networks of different training rounds miss
//! different voices. Round 8's missed whole unseen voices in a quiet room because their
//! score stayed up too few frames for its rule; an earlier round's network, with a rule of
//! its own at a high threshold, heard some of them and added no false wake over the dev
//! split (`calibrate.py --companion`, BENCHMARKS.md "A companion network").
//!
//! A companion's header may also give an `agreement` per sensitivity: the main network
//! over a lower threshold of its own for enough frames, while the companion was over its
//! threshold for enough of the last frames, fires the word too. Why: alone, each network
//! needs a threshold its false wakes on ordinary speech allow, and an unseen voice can
//! score under both; two networks of different training rounds rarely score high on the
//! same speech, so together they may listen lower. On the dev split it heard 6 more in
//! 100 of the espeak voices' phrases in a quiet room at `medium`, with no more false wakes
//! (BENCHMARKS.md, "Two networks agreeing"). Each companion has its own agreement with
//! the main network. Half floats let the bundled word carry four networks within the
//! training pipeline's 2/3 MB (calibrate.py's MAX_WORD_BYTES): round 8's and round 12's (128
//! channels) and round 22's in half floats, round 1's in f32; each companion's agreement
//! with round 8 hears more of the dev voices (BENCHMARKS.md, "Four networks", "Round 12",
//! "Round 22").
//!
//! A network's header may ask for its input to be normalised by a running mean
//! (`running_mean`, its weight per frame) instead of the fixed mean of its training clips:
//! each band less its exponential average, which starts at the file's mean when the runner
//! starts or is reset. Why: what a band carries steadily (a steady noise, a microphone's or
//! a room's colouring, a voice's own spectral shape) then never reaches the network, as
//! cepstral mean normalisation and PCEN do in speech recognisers. Round 22's network, the
//! bundled word's third in round 10's place, made the word hear 25 more of the 576 held-out
//! phrases in steady noise and none fewer in any other room (BENCHMARKS.md, "Round 22").

use std::sync::Arc;

use rustfft::num_complex::Complex32;
use rustfft::{Fft, FftPlanner};
use serde::Deserialize;

use super::{Detection, Sensitivity};

/// How a neural wake word file starts.
pub(super) const MAGIC: &[u8; 8] = b"SSWAKENN";

/// Bounds on what a file may ask for: a wake word is small, and the audio path must not
/// be made to allocate or compute without limit by a file.
const MAX_FILE_BYTES: usize = 8 << 20;
const MAX_HEADER_BYTES: usize = 64 << 10;
const MAX_CHANNELS: usize = 512;
const MAX_LAYERS: usize = 16;
const MAX_DILATION: usize = 256;
/// Networks in one word: each costs its share of the audio thread's budget.
const MAX_NETWORKS: usize = 4;

/// The front end this code implements; a file must ask for exactly it.
const SAMPLE_RATE: u32 = 16_000;
const WIN: usize = 400;
const HOP: usize = 160;
const NFFT: usize = 512;

/// Consecutive frames over the threshold before a detection fires, for files that do not
/// say (the first model's rule). A file's operating points were measured with its own.
const DEFAULT_MIN_FRAMES: usize = 2;
const MAX_MIN_FRAMES: usize = 50;
/// Frames under the threshold a run goes on through over the echo canceller's output
/// ([`super::Detector::set_over_echo`]). 2 sufficed for round 3's 20-frame rule; with
/// round 8's 24-frame rule of the time `tests/voice_echo.rs` missed 2-3 phrases in 10 said
/// over a reply, and the kitchen benchmark 2 in 30 with 4 and none with 6 (BENCHMARKS.md,
/// "Round 8's rule over the reply").
pub const ECHO_GAP: usize = 6;
/// Frames under the threshold before the word can fire again (one utterance, one
/// detection).
const REARM_FRAMES: usize = 50;
/// How far back an agreement may look for the companion's frames (2 s).
const MAX_AGREEMENT_WINDOW: usize = 200;

#[derive(Debug, Deserialize)]
struct Header {
    format: String,
    version: u32,
    name: String,
    sample_rate: u32,
    win: usize,
    hop: usize,
    nfft: usize,
    n_mels: usize,
    fmin: f64,
    fmax: f64,
    log_eps: f32,
    channels: usize,
    dilations: Vec<usize>,
    arrays: Vec<(String, Vec<usize>)>,
    operating_points: OperatingPoints,
    /// Consecutive frames over the threshold that fire (chosen with the operating points
    /// on the dev split).
    #[serde(default = "default_min_frames")]
    min_frames: usize,
    /// How long after the phrase's end the score typically first crosses the threshold.
    end_offset_ms: u32,
    /// A typical phrase's length (where `start` is placed).
    phrase_ms: u32,
    /// The length of a companion network's file right after this network's arrays (0:
    /// none).
    #[serde(default)]
    companion_bytes: usize,
    /// A companion's rule with the main network (none: it fires on its own rule only).
    #[serde(default)]
    agreement: Option<AgreementPoints>,
    /// How the arrays are stored.
    #[serde(default)]
    dtype: Dtype,
    /// The weight per frame of a running mean the network's input is normalised by
    /// instead of `mean` (which starts it): each band less its exponential average, so a
    /// colour a band carries steadily (a microphone's, a room's, a voice's) does not reach
    /// the network. None: the fixed mean.
    #[serde(default)]
    running_mean: Option<f32>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Dtype {
    #[default]
    F32,
    F16,
}

impl Dtype {
    fn width(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 => 2,
        }
    }

    fn read(self, raw: &[u8]) -> f32 {
        match self {
            Dtype::F32 => f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]),
            Dtype::F16 => half::f16::from_le_bytes([raw[0], raw[1]]).to_f32(),
        }
    }
}

fn default_min_frames() -> usize {
    DEFAULT_MIN_FRAMES
}

/// Thresholds measured for each sensitivity (false wakes per hour against detection,
/// on the training pipeline's dev voices).
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct OperatingPoints {
    pub low: f32,
    pub medium: f32,
    pub high: f32,
}

impl OperatingPoints {
    fn at(&self, sensitivity: Sensitivity) -> f32 {
        match sensitivity {
            Sensitivity::Low => self.low,
            Sensitivity::Medium => self.medium,
            Sensitivity::High => self.high,
        }
    }
}

/// When a companion and the main network fire the word together, per sensitivity (none
/// at a sensitivity: not there).
#[derive(Debug, Clone, Copy, Deserialize)]
struct AgreementPoints {
    /// The frames the companion's are counted over, the current one included.
    window_frames: usize,
    low: Option<Agreement>,
    medium: Option<Agreement>,
    high: Option<Agreement>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
struct Agreement {
    /// The main network's threshold and frames for this rule (a run, as its own rule's).
    main: f32,
    main_frames: usize,
    /// The companion's threshold, and how many frames of the window must be over it.
    companion: f32,
    companion_frames: usize,
}

impl AgreementPoints {
    fn at(&self, sensitivity: Sensitivity) -> Option<Agreement> {
        match sensitivity {
            Sensitivity::Low => self.low,
            Sensitivity::Medium => self.medium,
            Sensitivity::High => self.high,
        }
    }

    fn check(&self) -> Result<(), String> {
        if !(1..=MAX_AGREEMENT_WINDOW).contains(&self.window_frames) {
            return Err(format!(
                "agreement window_frames {} is not in 1-{MAX_AGREEMENT_WINDOW}",
                self.window_frames
            ));
        }
        for a in [self.low, self.medium, self.high].into_iter().flatten() {
            if !(0.0..=1.0).contains(&a.main) || !(0.0..=1.0).contains(&a.companion) {
                return Err(format!(
                    "agreement thresholds {} and {} are not both in 0-1",
                    a.main, a.companion
                ));
            }
            if !(1..=MAX_MIN_FRAMES).contains(&a.main_frames)
                || !(1..=self.window_frames).contains(&a.companion_frames)
            {
                return Err(format!(
                    "agreement frames {} and {} are not in 1-{MAX_MIN_FRAMES} and 1-{} (the window)",
                    a.main_frames, a.companion_frames, self.window_frames
                ));
            }
        }
        Ok(())
    }
}

/// What a word's runner listens with.
#[derive(Debug, Clone, Copy)]
pub(super) enum Listen {
    /// Every network at the threshold it measured for this sensitivity.
    At(Sensitivity),
    /// The main network alone at this threshold (an expert's `wake.threshold`: one
    /// number cannot mean the same for networks that score differently).
    Threshold(f32),
}

struct Block {
    dilation: usize,
    /// [3][channels]: oldest (t - 2d) first.
    depthwise: Vec<f32>,
    depthwise_bias: Vec<f32>,
    /// [channels in][channels out].
    pointwise: Vec<f32>,
    pointwise_bias: Vec<f32>,
}

/// The features a network reads; a word's networks must share them, as they are
/// computed once a frame for all of them.
#[derive(Debug, Clone, Copy, PartialEq)]
struct FrontEnd {
    n_mels: usize,
    fmin: f64,
    fmax: f64,
    log_eps: f32,
}

/// A parsed neural wake word: a main network and its companions, if any.
pub struct Model {
    name: String,
    bytes: Vec<u8>,
    n_mels: usize,
    log_eps: f32,
    /// Per mel bin: the first FFT bin with weight and the weights.
    mel: Vec<(usize, Vec<f32>)>,
    hann: Vec<f32>,
    /// The main network first: its operating points are the word's.
    networks: Vec<Network>,
}

/// One network of a word: its weights, normalisation and measured rule.
struct Network {
    channels: usize,
    mean: Vec<f32>,
    std: Vec<f32>,
    running_mean: Option<f32>,
    /// [3][n_mels][channels]: oldest frame first.
    w0: Vec<f32>,
    b0: Vec<f32>,
    blocks: Vec<Block>,
    head: Vec<f32>,
    head_bias: f32,
    points: OperatingPoints,
    min_frames: usize,
    end_offset: u64,
    phrase: u64,
    agreement: Option<AgreementPoints>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("networks", &self.networks.len())
            .finish_non_exhaustive()
    }
}

impl Model {
    /// Parses a model file; the error says what is wrong with it.
    pub(super) fn parse(bytes: &[u8]) -> Result<Model, String> {
        if bytes.len() > MAX_FILE_BYTES {
            return Err(format!(
                "{} bytes, more than a wake word's {MAX_FILE_BYTES}",
                bytes.len()
            ));
        }
        let (name, front, main, mut companion, mut rest) = parse_network(bytes)?;
        if main.agreement.is_some() {
            return Err(
                "the main network's header has an agreement: it belongs in a companion's".into(),
            );
        }
        let mut networks = vec![main];
        // What follows a network's arrays is its companion's file, that network's own
        // companions included: exactly `companion_bytes`.
        while companion > 0 {
            let n = networks.len();
            if n == MAX_NETWORKS {
                return Err(format!("more than {MAX_NETWORKS} networks"));
            }
            if rest.len() < companion {
                return Err(format!(
                    "companion network {n} of {companion} bytes is cut short at {}",
                    rest.len()
                ));
            }
            if rest.len() > companion {
                break;
            }
            let (other, other_front, next, more, after) =
                parse_network(rest).map_err(|e| format!("companion network {n}: {e}"))?;
            if other != name || other_front != front {
                return Err(format!(
                    "companion network {n} listens for {other:?} with {other_front:?}, the word for {name:?} with {front:?}"
                ));
            }
            networks.push(next);
            companion = more;
            rest = after;
        }
        let extra = rest.len() - companion;
        if extra > 0 {
            return Err(format!("{extra} bytes after the last array"));
        }
        let bins = NFFT / 2 + 1;
        Ok(Model {
            name,
            bytes: bytes.to_vec(),
            n_mels: front.n_mels,
            log_eps: front.log_eps,
            mel: mel_filters(front.n_mels, bins, front.fmin, front.fmax),
            hann: (0..WIN)
                .map(|i| {
                    (0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / WIN as f64).cos()) as f32
                })
                .collect(),
            networks,
        })
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The threshold a sensitivity stands for (the main network's).
    pub(super) fn threshold(&self, sensitivity: Sensitivity) -> f32 {
        self.networks[0].points.at(sensitivity)
    }

    /// The audio one score depends on, in samples (the widest network's).
    pub(super) fn receptive_samples(&self) -> u64 {
        let frames = self
            .networks
            .iter()
            .map(|n| 3 + 2 * n.blocks.iter().map(|b| b.dilation).sum::<usize>())
            .max()
            .unwrap_or(3);
        ((frames - 1) * HOP + WIN) as u64
    }
}

/// One network's file: its phrase, front end, network, the length of the companion
/// network's file announced after it, and the bytes after its arrays.
type Parsed<'a> = (String, FrontEnd, Network, usize, &'a [u8]);

fn parse_network(bytes: &[u8]) -> Result<Parsed<'_>, String> {
    let rest = bytes
        .strip_prefix(MAGIC.as_slice())
        .ok_or("not a neural wake word")?;
    let (len, rest) = rest.split_at_checked(4).ok_or("truncated header")?;
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if len > MAX_HEADER_BYTES {
        return Err(format!(
            "a header of {len} bytes (at most {MAX_HEADER_BYTES})"
        ));
    }
    let (header, mut data) = rest.split_at_checked(len).ok_or("truncated header")?;
    let h: Header =
        serde_json::from_slice(header).map_err(|e| format!("unreadable header: {e}"))?;
    if h.format != "strawberry-wake-tcn" || h.version != 1 {
        return Err(format!(
            "model format {:?} version {}, this build reads strawberry-wake-tcn version 1",
            h.format, h.version
        ));
    }
    if (h.sample_rate, h.win, h.hop, h.nfft) != (SAMPLE_RATE, WIN, HOP, NFFT) {
        return Err(format!(
            "front end {} Hz, window {}, hop {}, FFT {}; this build computes 16000 Hz, 400, 160, 512",
            h.sample_rate, h.win, h.hop, h.nfft
        ));
    }
    let mels_valid = (1..=128).contains(&h.n_mels)
        && (0.0..h.fmax).contains(&h.fmin)
        && h.fmax <= f64::from(SAMPLE_RATE) / 2.0
        && h.log_eps > 0.0
        && h.log_eps.is_finite();
    if !mels_valid {
        return Err("mel settings out of range".into());
    }
    if !(1..=MAX_CHANNELS).contains(&h.channels)
        || h.dilations.len() > MAX_LAYERS
        || h.dilations.iter().any(|d| !(1..=MAX_DILATION).contains(d))
    {
        return Err("network shape out of range".into());
    }
    let points = h.operating_points;
    for p in [points.low, points.medium, points.high] {
        if !(0.0..=1.0).contains(&p) {
            return Err(format!("operating point {p} is not in 0-1"));
        }
    }
    if !(1..=MAX_MIN_FRAMES).contains(&h.min_frames) {
        return Err(format!(
            "min_frames {} is not in 1-{MAX_MIN_FRAMES}",
            h.min_frames
        ));
    }
    if let Some(a) = &h.agreement {
        a.check()?;
    }
    if let Some(a) = h.running_mean
        && !(a > 0.0 && a <= 1.0)
    {
        return Err(format!("running_mean {a} is not in (0, 1]"));
    }
    let (c, m) = (h.channels, h.n_mels);
    let mut expected: Vec<(String, Vec<usize>)> = vec![
        ("mean".into(), vec![m]),
        ("std".into(), vec![m]),
        ("b0".into(), vec![c]),
        ("bh".into(), vec![1]),
    ];
    let layers = h.dilations.len();
    for (prefix, shape) in [
        ("db", vec![c]),
        ("dw", vec![3, c]),
        ("pb", vec![c]),
        ("pw", vec![c, c]),
    ] {
        for i in 0..layers {
            expected.push((format!("{prefix}{i}"), shape.clone()));
        }
    }
    expected.push(("w0".into(), vec![3, m, c]));
    expected.push(("wh".into(), vec![c]));
    let mut sorted = expected.clone();
    sorted.sort();
    let mut listed = h.arrays.clone();
    listed.sort();
    if listed != sorted {
        return Err(format!(
            "arrays {:?}, expected {:?}",
            h.arrays.iter().map(|a| &a.0).collect::<Vec<_>>(),
            sorted.iter().map(|a| &a.0).collect::<Vec<_>>()
        ));
    }
    let mut arrays = std::collections::HashMap::new();
    let width = h.dtype.width();
    for (name, shape) in &h.arrays {
        let n: usize = shape.iter().product();
        let (raw, rest) = data
            .split_at_checked(n * width)
            .ok_or_else(|| format!("array {name} is cut short"))?;
        data = rest;
        let values: Vec<f32> = raw.chunks_exact(width).map(|b| h.dtype.read(b)).collect();
        if values.iter().any(|v| !v.is_finite()) {
            return Err(format!("array {name} holds non-finite values"));
        }
        arrays.insert(name.clone(), values);
    }
    let mut take = |name: &str| arrays.remove(name).unwrap_or_default();
    let std = take("std");
    if std.iter().any(|&s| s <= 0.0) {
        return Err("a normalisation scale is not positive".into());
    }
    let blocks = h
        .dilations
        .iter()
        .enumerate()
        .map(|(i, &dilation)| Block {
            dilation,
            depthwise: take(&format!("dw{i}")),
            depthwise_bias: take(&format!("db{i}")),
            pointwise: take(&format!("pw{i}")),
            pointwise_bias: take(&format!("pb{i}")),
        })
        .collect();
    let head_bias = take("bh")[0];
    Ok((
        h.name,
        FrontEnd {
            n_mels: m,
            fmin: h.fmin,
            fmax: h.fmax,
            log_eps: h.log_eps,
        },
        Network {
            channels: c,
            mean: take("mean"),
            std,
            running_mean: h.running_mean,
            w0: take("w0"),
            b0: take("b0"),
            blocks,
            head: take("wh"),
            head_bias,
            points,
            min_frames: h.min_frames,
            end_offset: u64::from(h.end_offset_ms) * u64::from(SAMPLE_RATE) / 1000,
            phrase: u64::from(h.phrase_ms) * u64::from(SAMPLE_RATE) / 1000,
            agreement: h.agreement,
        },
        h.companion_bytes,
        data,
    ))
}

/// HTK-style triangles, as the training script makes them (computed in f64, kept in
/// f32), stored as each bin's non-zero span.
fn mel_filters(count: usize, bins: usize, fmin: f64, fmax: f64) -> Vec<(usize, Vec<f32>)> {
    let to_mel = |f: f64| 2595.0 * (1.0 + f / 700.0).log10();
    let to_hz = |m: f64| 700.0 * (10f64.powf(m / 2595.0) - 1.0);
    let (lo, hi) = (to_mel(fmin), to_mel(fmax));
    let hz: Vec<f64> = (0..count + 2)
        .map(|i| to_hz(lo + (hi - lo) * i as f64 / (count + 1) as f64))
        .collect();
    (0..count)
        .map(|m| {
            let weights: Vec<f32> = (0..bins)
                .map(|b| {
                    let f = b as f64 * f64::from(SAMPLE_RATE) / NFFT as f64;
                    let up = (f - hz[m]) / (hz[m + 1] - hz[m]);
                    let down = (hz[m + 2] - f) / (hz[m + 2] - hz[m + 1]);
                    up.min(down).max(0.0) as f32
                })
                .collect();
            let first = weights.iter().position(|&w| w > 0.0).unwrap_or(0);
            let last = weights.iter().rposition(|&w| w > 0.0).unwrap_or(0);
            (first, weights[first..=last.max(first)].to_vec())
        })
        .collect()
}

/// The last `slots` columns of a layer's input, newest last.
struct History {
    width: usize,
    slots: usize,
    buf: Vec<f32>,
    /// Index of the oldest slot.
    head: usize,
}

impl History {
    fn new(width: usize, slots: usize) -> History {
        History {
            width,
            slots,
            buf: vec![0.0; width * slots],
            head: 0,
        }
    }

    fn push(&mut self, column: &[f32]) {
        let at = self.head * self.width;
        self.buf[at..at + self.width].copy_from_slice(column);
        self.head = (self.head + 1) % self.slots;
    }

    /// The column `ago` steps before the newest.
    fn ago(&self, ago: usize) -> &[f32] {
        let i = (self.head + self.slots - 1 - ago) % self.slots;
        &self.buf[i * self.width..(i + 1) * self.width]
    }

    fn clear(&mut self) {
        self.buf.fill(0.0);
        self.head = 0;
    }
}

/// A clip's log-mel frames (40 values each) and the network's logit after each
/// (sigmoid of it: the score).
#[derive(Debug, Default, Clone)]
pub struct Trace {
    pub features: Vec<Vec<f32>>,
    pub logits: Vec<f32>,
}

/// One neural word listening to the stream.
pub(super) struct Runner {
    model: Arc<Model>,
    fft: Arc<dyn Fft<f32>>,
    spectrum: Vec<Complex32>,
    scratch: Vec<Complex32>,
    /// Samples not yet consumed by a whole window.
    audio: Vec<f32>,
    /// Stream position of `audio[0]`.
    audio_at: u64,
    /// The current frame's log-mel energies (shared by the networks).
    log_mel: Vec<f32>,
    /// The networks listening, in the model's order (the main one alone for an
    /// expert's threshold).
    nets: Vec<NetState>,
    /// The companions' agreements with the main network at this sensitivity.
    agreements: Vec<AgreementState>,
    /// This frame's score of each network.
    scores: Vec<f32>,
    /// Frames under the threshold a run goes on through (0: consecutive frames).
    max_gap: usize,
}

/// A rule over one network's scores: a run of frames over a threshold fires.
struct Rule {
    threshold: f32,
    min_frames: usize,
    /// The current run: its frames (a dip it went on through included), the frames
    /// under the threshold since its last frame over it, its best score and where its
    /// first frame ended.
    over: usize,
    dip: usize,
    best: f32,
    first_end: u64,
    /// Frames under the threshold since the rule last fired (`None`: armed).
    rearm: Option<usize>,
}

/// One network's state in a runner.
struct NetState {
    rule: Rule,
    input: History,
    hidden: Vec<History>,
    /// The current frame normalised with the network's statistics.
    normalised: Vec<f32>,
    /// Each band's running mean (networks normalised by one).
    average: Vec<f32>,
    column: Vec<f32>,
    next: Vec<f32>,
    mixed: Vec<f32>,
    peak: Option<(f32, u64)>,
}

/// A companion's agreement listening: the main network's run under its own rule for it,
/// and which of the companion's last frames were over its threshold.
struct AgreementState {
    companion: usize,
    main: Rule,
    threshold: f32,
    needed: usize,
    window: std::collections::VecDeque<bool>,
    window_frames: usize,
}

impl Runner {
    pub(super) fn new(model: Arc<Model>, listen: Listen, position: u64) -> Runner {
        let fft = FftPlanner::new().plan_fft_forward(NFFT);
        let scratch = vec![Complex32::default(); fft.get_inplace_scratch_len()];
        let thresholds: Vec<f32> = match listen {
            Listen::At(sensitivity) => model
                .networks
                .iter()
                .map(|n| n.points.at(sensitivity))
                .collect(),
            Listen::Threshold(t) => vec![t],
        };
        let nets: Vec<NetState> = model
            .networks
            .iter()
            .zip(thresholds)
            .map(|(n, threshold)| NetState::new(n, model.n_mels, threshold))
            .collect();
        let agreements = match listen {
            Listen::At(sensitivity) => model
                .networks
                .iter()
                .enumerate()
                .skip(1)
                .filter_map(|(companion, n)| {
                    let points = n.agreement?;
                    let a = points.at(sensitivity)?;
                    Some(AgreementState {
                        companion,
                        main: Rule::new(a.main, a.main_frames),
                        threshold: a.companion,
                        needed: a.companion_frames,
                        window: std::collections::VecDeque::with_capacity(points.window_frames),
                        window_frames: points.window_frames,
                    })
                })
                .collect(),
            Listen::Threshold(_) => Vec::new(),
        };
        Runner {
            fft,
            spectrum: vec![Complex32::default(); NFFT],
            scratch,
            audio: Vec::with_capacity(WIN + 512),
            audio_at: position,
            log_mel: vec![0.0; model.n_mels],
            scores: vec![0.0; nets.len()],
            nets,
            agreements,
            max_gap: 0,
            model,
        }
    }

    pub(super) fn name(&self) -> &str {
        &self.model.name
    }

    /// The main network's threshold.
    pub(super) fn threshold(&self) -> f32 {
        self.nets[0].rule.threshold
    }

    /// The main network's highest score so far and where its phrase ended.
    pub(super) fn peak(&self) -> Option<(f32, u64)> {
        self.nets[0].peak
    }

    /// Forgets the audio heard so far; `position` is where the stream goes on from.
    pub(super) fn reset(&mut self, position: u64) {
        self.audio.clear();
        self.audio_at = position;
        for (net, network) in self.nets.iter_mut().zip(&self.model.networks) {
            net.average.clone_from(&network.mean);
            net.input.clear();
            for h in &mut net.hidden {
                h.clear();
            }
            net.rule.reset();
        }
        for a in &mut self.agreements {
            a.main.reset();
            a.window.clear();
        }
    }

    /// Frames under the threshold a run goes on through from now on.
    pub(super) fn set_max_gap(&mut self, frames: usize) {
        self.max_gap = frames;
    }

    /// Takes samples that follow the ones before (already clamped to -1..1) and returns
    /// a detection when the word fired.
    pub(super) fn process(&mut self, samples: &[f32]) -> Option<Detection> {
        self.audio.extend_from_slice(samples);
        let mut found = None;
        let mut used = 0;
        while self.audio.len() - used >= WIN {
            let end = self.audio_at + (used + WIN) as u64;
            self.front_end(used);
            used += HOP;
            let mut fired = None;
            let networks = &self.model.networks;
            for ((net, network), score) in self.nets.iter_mut().zip(networks).zip(&mut self.scores)
            {
                *score = sigmoid(net.frame(network, &self.log_mel));
                let decided = net.decide(network, &self.model.name, *score, end, self.max_gap);
                if let Some(d) = decided {
                    fired.get_or_insert(d);
                }
            }
            for a in &mut self.agreements {
                let decided = a.decide(&self.scores, networks, &self.model.name, end, self.max_gap);
                if let Some(d) = decided {
                    fired.get_or_insert(d);
                }
            }
            if let Some(d) = fired {
                // One utterance, one detection: every network waits to re-arm.
                for net in &mut self.nets {
                    net.rule.disarm();
                }
                for a in &mut self.agreements {
                    a.main.disarm();
                }
                found.get_or_insert(d);
            }
        }
        self.audio.drain(..used);
        self.audio_at += used as u64;
        found
    }

    /// Every frame's log-mel features and the main network's score logit for a clip,
    /// from a fresh start (what the training script exports for the exactness test and
    /// the evaluation).
    pub(super) fn trace(&mut self, samples: &[f32]) -> Trace {
        let mut trace = Trace::default();
        self.audio
            .extend(samples.iter().map(|s| s.clamp(-1.0, 1.0)));
        let mut used = 0;
        while self.audio.len() - used >= WIN {
            self.front_end(used);
            used += HOP;
            let logit = self.nets[0].frame(&self.model.networks[0], &self.log_mel);
            trace.features.push(self.log_mel.clone());
            trace.logits.push(logit);
        }
        self.audio.drain(..used);
        self.audio_at += used as u64;
        trace
    }

    /// The log-mel energies of the window starting at `audio[at]`, into `log_mel`.
    fn front_end(&mut self, at: usize) {
        let m = &*self.model;
        for (i, slot) in self.spectrum.iter_mut().enumerate() {
            *slot = if i < WIN {
                Complex32::new(self.audio[at + i] * m.hann[i], 0.0)
            } else {
                Complex32::default()
            };
        }
        self.fft
            .process_with_scratch(&mut self.spectrum, &mut self.scratch);
        for (k, (first, weights)) in m.mel.iter().enumerate() {
            let energy: f32 = weights
                .iter()
                .zip(&self.spectrum[*first..])
                .map(|(w, c)| w * (c.re * c.re + c.im * c.im))
                .sum();
            self.log_mel[k] = (energy + m.log_eps).ln();
        }
    }
}

impl Rule {
    fn new(threshold: f32, min_frames: usize) -> Rule {
        Rule {
            threshold,
            min_frames,
            over: 0,
            dip: 0,
            best: 0.0,
            first_end: 0,
            rearm: None,
        }
    }

    fn reset(&mut self) {
        self.over = 0;
        self.dip = 0;
        self.rearm = None;
    }

    /// Waits for the score to stay under the threshold before it can fire again.
    fn disarm(&mut self) {
        self.over = 0;
        self.dip = 0;
        self.rearm = Some(0);
    }

    /// Takes a frame's score; when the run reaches the rule's frames, returns its frames,
    /// best score and where its first frame's phrase ended.
    fn step(&mut self, score: f32, phrase_end: u64, max_gap: usize) -> Option<(usize, f32, u64)> {
        let over = score >= self.threshold;
        if let Some(under) = self.rearm.as_mut() {
            *under = if over { 0 } else { *under + 1 };
            if *under >= REARM_FRAMES {
                self.rearm = None;
            }
            return None;
        }
        if !over {
            if self.over > 0 {
                self.dip += 1;
                if self.dip > max_gap {
                    self.over = 0;
                    self.dip = 0;
                }
            }
            return None;
        }
        if self.over == 0 {
            self.first_end = phrase_end;
            self.best = 0.0;
        }
        self.over += self.dip + 1;
        self.dip = 0;
        self.best = self.best.max(score);
        (self.over >= self.min_frames).then_some((self.over, self.best, self.first_end))
    }
}

/// The detection a run of the network `m` makes, decided at `end`.
fn detection(
    m: &Network,
    name: &str,
    (frames, best, first_end): (usize, f32, u64),
    end: u64,
) -> Detection {
    Detection {
        name: name.to_string(),
        score: best,
        avg_score: best,
        start: first_end.saturating_sub(m.phrase),
        end: first_end,
        fired_at: end,
        frames,
        proximity_db: 0.0,
    }
}

impl AgreementState {
    /// Takes every network's score of a frame decided at `end`; the main network's run
    /// fires the word when the companion was over its threshold for enough of the
    /// window's frames, and either way waits to re-arm, as a network's own rule does.
    fn decide(
        &mut self,
        scores: &[f32],
        networks: &[Network],
        name: &str,
        end: u64,
        max_gap: usize,
    ) -> Option<Detection> {
        if self.window.len() == self.window_frames {
            self.window.pop_front();
        }
        self.window
            .push_back(scores[self.companion] >= self.threshold);
        let m = &networks[0];
        let run = self
            .main
            .step(scores[0], end.saturating_sub(m.end_offset), max_gap)?;
        self.main.disarm();
        let agreed = self.window.iter().filter(|&&over| over).count() >= self.needed;
        agreed.then(|| detection(m, name, run, end))
    }
}

impl NetState {
    fn new(network: &Network, n_mels: usize, threshold: f32) -> NetState {
        let c = network.channels;
        NetState {
            rule: Rule::new(threshold, network.min_frames),
            input: History::new(n_mels, 3),
            hidden: network
                .blocks
                .iter()
                .map(|b| History::new(c, 2 * b.dilation + 1))
                .collect(),
            normalised: vec![0.0; n_mels],
            average: network.mean.clone(),
            column: vec![0.0; c],
            next: vec![0.0; c],
            mixed: vec![0.0; c],
            peak: None,
        }
    }

    fn decide(
        &mut self,
        m: &Network,
        name: &str,
        score: f32,
        end: u64,
        max_gap: usize,
    ) -> Option<Detection> {
        let phrase_end = end.saturating_sub(m.end_offset);
        if self.peak.is_none_or(|(s, _)| score > s) {
            self.peak = Some((score, phrase_end));
        }
        let run = self.rule.step(score, phrase_end, max_gap)?;
        Some(detection(m, name, run, end))
    }

    /// Runs the current frame's features through the network; returns its logit.
    fn frame(&mut self, m: &Network, log_mel: &[f32]) -> f32 {
        match m.running_mean {
            None => {
                for (k, &v) in log_mel.iter().enumerate() {
                    self.normalised[k] = (v - m.mean[k]) / m.std[k];
                }
            }
            Some(weight) => {
                for (k, &v) in log_mel.iter().enumerate() {
                    self.average[k] += weight * (v - self.average[k]);
                    self.normalised[k] = (v - self.average[k]) / m.std[k];
                }
            }
        }
        self.input.push(&self.normalised);
        let c = m.channels;
        let n_mels = log_mel.len();
        // The full convolution over the last three feature frames.
        self.column.copy_from_slice(&m.b0);
        for k in 0..3 {
            let x = self.input.ago(2 - k);
            let w = &m.w0[k * n_mels * c..(k + 1) * n_mels * c];
            for (i, &xv) in x.iter().enumerate() {
                for (o, &wv) in self.column.iter_mut().zip(&w[i * c..(i + 1) * c]) {
                    *o += xv * wv;
                }
            }
        }
        relu(&mut self.column);
        for (b, hist) in m.blocks.iter().zip(&mut self.hidden) {
            hist.push(&self.column);
            let d = b.dilation;
            let (oldest, middle, newest) = (hist.ago(2 * d), hist.ago(d), hist.ago(0));
            for ch in 0..c {
                let z = oldest[ch] * b.depthwise[ch]
                    + middle[ch] * b.depthwise[c + ch]
                    + newest[ch] * b.depthwise[2 * c + ch]
                    + b.depthwise_bias[ch];
                self.mixed[ch] = z.max(0.0);
            }
            self.next.copy_from_slice(&b.pointwise_bias);
            for (i, &a) in self.mixed.iter().enumerate() {
                if a == 0.0 {
                    continue;
                }
                for (o, &wv) in self.next.iter_mut().zip(&b.pointwise[i * c..(i + 1) * c]) {
                    *o += a * wv;
                }
            }
            for ((o, &n), &x) in self.column.iter_mut().zip(&self.next).zip(newest) {
                *o = (x + n).max(0.0);
            }
        }
        self.column
            .iter()
            .zip(&m.head)
            .map(|(a, w)| a * w)
            .sum::<f32>()
            + m.head_bias
    }
}

fn relu(v: &mut [f32]) {
    for x in v {
        *x = x.max(0.0);
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}
