//! The detector's hot path: rustpotter 3.0.2's reference-word detection, computed the
//! same way but without its per-frame costs.
//!
//! Why not call rustpotter: its `process_samples` cost 3.2% of a core with the bundled
//! word (BENCHMARKS.md), and nearly all of that was bookkeeping, not arithmetic: every
//! 10 ms it planned a new FFT, copied the feature window three times per reference
//! recording, and allocated and then copied two full (n+1)² cost matrices for each of
//! the 11 time-warping comparisons, of which only a band 10 cells wide is ever filled.
//! Here the FFT plan, the filter bank's non-zero spans, the DCT table and the
//! recordings' vector norms are made once, and each comparison keeps two rows.
//!
//! The arithmetic is rustpotter's, operation for operation and in the same order
//! (sums are not reordered, the square root before squaring is kept), so that words
//! trained by rustpotter (`wakeword train`) score here exactly as they would there:
//! `tests/wake.rs` feeds the same audio to both and compares every score. That includes
//! its quirks: each recording is compared with the *first* frames of the window, and
//! the cost is read one row before the end of the warping matrix. rustpotter stays the
//! file format and the trainer.

use std::sync::Arc;

use rustfft::num_complex::Complex32;
use rustfft::{Fft, FftPlanner};

use rustpotter::WakewordRef;

use super::{FRAME_SAMPLES, ScoreMode, Settings, Vad};

/// Samples between feature vectors (10 ms); three make a 30 ms analysis frame.
const SHIFT: usize = 160;

/// rustpotter's pre-emphasis coefficient.
const PRE_EMPHASIS: f32 = 0.97;

/// The gain normalizer's limits (rustpotter's defaults).
const MIN_GAIN: f32 = 0.1;
const MAX_GAIN: f32 = 1.0;

/// Cepstral features of 10 ms steps, as rustpotter's extractor makes them.
struct Features {
    /// Coefficients computed, the first of which is dropped.
    coefficients: usize,
    fft: Arc<dyn Fft<f32>>,
    spectrum: Vec<Complex32>,
    scratch: Vec<Complex32>,
    hamming: Vec<f32>,
    /// Each mel filter's first bin and its weights from there (the rest are 0).
    filters: Vec<(usize, Vec<f32>)>,
    /// `dct[k * coefficients + n]`: the DCT's cosine for output k, input n.
    dct: Vec<f32>,
    magnitudes: Vec<f32>,
    log_mel: Vec<f32>,
    /// The last three pre-emphasised 10 ms parts.
    samples: Vec<f32>,
}

impl Features {
    fn new(size: usize) -> Features {
        let coefficients = size + 1;
        let fft = FftPlanner::new().plan_fft_forward(FRAME_SAMPLES);
        let scratch = vec![Complex32::default(); fft.get_inplace_scratch_len()];
        let bins = FRAME_SAMPLES / 2;
        let last = (FRAME_SAMPLES - 1) as f32;
        let hamming = (0..FRAME_SAMPLES)
            .map(|s| 0.54 - (0.46 * (2. * std::f32::consts::PI * (s as f32 / last)).cos()))
            .collect();
        let pi_over_n = std::f32::consts::PI / coefficients as f32;
        let dct = (0..coefficients)
            .flat_map(|k| {
                (0..coefficients).map(move |n| (pi_over_n * (n as f32 + 0.5) * k as f32).cos())
            })
            .collect();
        Features {
            coefficients,
            fft,
            spectrum: vec![Complex32::default(); FRAME_SAMPLES],
            scratch,
            hamming,
            filters: mel_filters(coefficients, bins),
            dct,
            magnitudes: vec![0.; bins],
            log_mel: vec![0.; coefficients],
            samples: Vec::with_capacity(FRAME_SAMPLES),
        }
    }

    fn reset(&mut self) {
        self.samples.clear();
    }

    /// Takes one 10 ms part; once three were seen, appends the feature vector of the
    /// last 30 ms to `out`.
    fn push_part(&mut self, part: &[f32], out: &mut Vec<f32>) -> bool {
        let full = self.samples.len() >= FRAME_SAMPLES;
        if full {
            self.samples.drain(..SHIFT);
        }
        // rustpotter starts the filter afresh in every part.
        let mut previous = 0.;
        self.samples.extend(part.iter().map(|&s| {
            let emphasised = s - PRE_EMPHASIS * previous;
            previous = s;
            emphasised
        }));
        if !full {
            return false;
        }
        for ((c, &s), &w) in self
            .spectrum
            .iter_mut()
            .zip(&self.samples)
            .zip(&self.hamming)
        {
            *c = Complex32 { re: s * w, im: 0. };
        }
        self.fft
            .process_with_scratch(&mut self.spectrum, &mut self.scratch);
        for (m, c) in self.magnitudes.iter_mut().zip(&self.spectrum) {
            *m = ((c.re * c.re) + (c.im * c.im)).sqrt();
        }
        for (l, (start, weights)) in self.log_mel.iter_mut().zip(&self.filters) {
            let energy: f32 = self.magnitudes[*start..]
                .iter()
                .zip(weights)
                .map(|(m, w)| m * m * w)
                .sum();
            *l = (energy + f32::MIN_POSITIVE).ln();
        }
        // The first coefficient (overall level) is dropped.
        for k in 1..self.coefficients {
            let row = &self.dct[k * self.coefficients..(k + 1) * self.coefficients];
            let sum: f32 = self.log_mel.iter().zip(row).map(|(x, c)| x * c).sum();
            out.push(2. * sum);
        }
        true
    }
}

/// rustpotter's triangular mel filters from 0 Hz to 8 kHz over `bins` FFT bins, each
/// kept as its span of bins.
fn mel_filters(count: usize, bins: usize) -> Vec<(usize, Vec<f32>)> {
    let rate = super::SAMPLE_RATE as f32;
    let mel = |f: f32| 1127. * (1. + (f / 700.0)).ln();
    let (min_mel, max_mel) = (mel(0.).floor(), mel(rate / 2.).floor());
    let centres: Vec<usize> = (0..count + 2)
        .map(|i| {
            let f = i as f32 * (max_mel - min_mel) / (count + 1) as f32 + min_mel;
            let mut tmp = (1_f32 + 1000.0 / 700.0).ln() / 1000.0;
            tmp = ((f * tmp).exp() - 1.) / (rate / 2.);
            ((0.5 + 700. * bins as f32 * tmp).floor() as usize).min(bins)
        })
        .collect();
    (0..count)
        .map(|i| {
            let (begin, centre, end) = (centres[i], centres[i + 1], centres[i + 2]);
            let up = (centre - begin) as f32;
            let down = (end - centre) as f32;
            let weights = (begin..centre)
                .map(|k| (k - begin) as f32 / up)
                .chain((centre..end).map(|k| (end - k) as f32 / down))
                .collect();
            (begin, weights)
        })
        .collect()
}

/// A feature sequence with each vector's squared norm.
struct Template {
    frames: Vec<f32>,
    norms: Vec<f32>,
    len: usize,
}

impl Template {
    fn new(frames: &[Vec<f32>]) -> Template {
        Template {
            frames: frames.iter().flatten().copied().collect(),
            norms: frames.iter().map(|f| squared_norm(f)).collect(),
            len: frames.len(),
        }
    }
}

fn squared_norm(v: &[f32]) -> f32 {
    let mut sum = 0.;
    for x in v {
        sum += x * x;
    }
    sum
}

struct Word {
    name: String,
    average: Option<Template>,
    recordings: Vec<Template>,
    rms_level: f32,
}

/// What a word scored on one window.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Scored {
    pub name: String,
    pub score: f32,
    pub avg_score: f32,
    /// Length (in feature frames) of the recording that scored best.
    pub best_frames: usize,
    /// Consecutive windows over the threshold.
    pub counter: usize,
}

/// rustpotter's voice gate: a frame is voice when more than 10 of the last 50 frames'
/// mean absolute coefficient stand out from the quietest; then 500 frames are scored.
struct VoiceGate {
    factor: f32,
    levels: Vec<f32>,
    index: usize,
    countdown: usize,
}

impl VoiceGate {
    fn new(factor: f32) -> VoiceGate {
        VoiceGate {
            factor,
            levels: vec![f32::NAN; 50],
            index: 0,
            countdown: 0,
        }
    }

    fn is_voice(&mut self, features: &[f32]) -> bool {
        self.levels[self.index] =
            features.iter().map(|v| v.abs()).sum::<f32>() / features.len() as f32;
        self.index = (self.index + 1) % self.levels.len();
        let quietest = self
            .levels
            .iter()
            .filter(|l| !l.is_nan())
            .min_by(|a, b| a.total_cmp(b))
            .copied()
            .unwrap_or(0.)
            .max(0.01);
        let over = quietest * self.factor;
        if self.levels.iter().filter(|&&l| l > over).count() > 10 {
            self.countdown = 500;
        }
        if self.countdown > 0 {
            self.countdown -= 1;
            true
        } else {
            false
        }
    }

    fn reset(&mut self) {
        self.levels.fill(f32::NAN);
        self.index = 0;
        self.countdown = 0;
    }
}

/// rustpotter's input level normalizer: scales frames towards the recordings' level
/// (averaged over a third of the window), never up.
struct GainNormalizer {
    levels: Vec<f32>,
    window: usize,
    target_sqrt: f32,
}

impl GainNormalizer {
    fn gain(&mut self, rms: f32) -> f32 {
        if self.target_sqrt.is_nan() || rms == 0. {
            return 1.;
        }
        self.levels.push(rms);
        if self.levels.len() > self.window {
            self.levels.remove(0);
        }
        let level = self.levels.iter().sum::<f32>() / self.levels.len() as f32;
        let gain = self.target_sqrt / level.sqrt();
        ((gain * 10.).round() / 10.).clamp(MIN_GAIN, MAX_GAIN)
    }
}

/// Scores the stream against reference words, as rustpotter's detector does.
pub(super) struct Engine {
    threshold: f32,
    avg_threshold: f32,
    min_scores: usize,
    eager: bool,
    score_mode: ScoreMode,
    score_ref: f32,
    band: usize,
    voice: Option<VoiceGate>,
    gain: Option<GainNormalizer>,
    words: Vec<Word>,
    features: Option<Features>,
    size: usize,
    /// The last `window_frames` feature vectors, oldest first, flattened.
    window: Vec<f32>,
    window_frames: usize,
    partial: Option<Scored>,
    countdown: usize,
    /// This frame's feature vectors.
    new_features: Vec<f32>,
    scratch: Scratch,
}

impl Engine {
    pub(super) fn new(settings: &Settings, threshold: f32) -> Engine {
        Engine {
            threshold,
            avg_threshold: settings.avg_threshold,
            min_scores: settings.min_scores,
            eager: settings.eager,
            score_mode: settings.score_mode,
            score_ref: settings.score_ref,
            band: usize::from(settings.band_size),
            voice: match settings.vad {
                Vad::Off => None,
                Vad::Easy => Some(VoiceGate::new(2.)),
                Vad::Medium => Some(VoiceGate::new(2.5)),
                Vad::Hard => Some(VoiceGate::new(3.)),
            },
            gain: settings.gain_normalizer.then(|| GainNormalizer {
                levels: Vec::new(),
                window: 1,
                target_sqrt: f32::NAN,
            }),
            words: Vec::new(),
            features: None,
            size: 0,
            window: Vec::new(),
            window_frames: 0,
            partial: None,
            countdown: 0,
            new_features: Vec::new(),
            scratch: Scratch::default(),
        }
    }

    /// Adds a word, replacing one of the same name; all words need one feature size.
    pub(super) fn add_word(&mut self, w: &WakewordRef) -> Result<(), String> {
        self.remove_word(&w.name);
        let size = usize::from(w.mfcc_size);
        if self.words.is_empty() {
            self.size = size;
            self.features = Some(Features::new(size));
            self.reset();
        } else if size != self.size {
            return Err(format!(
                "its features have {size} coefficients, the other words' {}: train it again with `strawberry-spoke wakeword train`",
                self.size
            ));
        }
        self.words.push(Word {
            name: w.name.clone(),
            average: w.avg_features.as_deref().map(Template::new),
            recordings: w
                .samples_features
                .values()
                .map(|f| Template::new(f))
                .collect(),
            rms_level: w.rms_level,
        });
        self.on_words_changed();
        Ok(())
    }

    pub(super) fn remove_word(&mut self, name: &str) -> bool {
        let before = self.words.len();
        self.words.retain(|w| w.name != name);
        let removed = self.words.len() != before;
        if removed {
            self.on_words_changed();
        }
        removed
    }

    fn on_words_changed(&mut self) {
        self.window_frames = self
            .words
            .iter()
            .flat_map(|w| w.recordings.iter().map(|r| r.len))
            .max()
            .unwrap_or(0);
        let target = self
            .words
            .iter()
            .fold(f32::NAN, |level, w| w.rms_level.max(level));
        if let Some(gain) = self.gain.as_mut() {
            gain.target_sqrt = target.sqrt();
            gain.window = (self.window_frames / 3).max(1);
        }
        // After a longer word is removed, rustpotter would keep scoring the first frames
        // of its longer window forever; the window shrinks to the newest frames instead.
        let keep = self.window_frames * self.size;
        if self.window.len() > keep {
            self.window.drain(..self.window.len() - keep);
        }
    }

    /// The longest recording, in feature frames: the window the stream is scored in.
    pub(super) fn window_frames(&self) -> usize {
        self.window_frames
    }

    /// The best candidate while the engine waits to see if a better one follows.
    pub(super) fn partial(&self) -> Option<&Scored> {
        self.partial.as_ref()
    }

    /// Forgets the audio heard so far. Like rustpotter's, this leaves the countdown of
    /// a pending candidate where it was.
    pub(super) fn reset(&mut self) {
        self.partial = None;
        self.window.clear();
        if let Some(f) = self.features.as_mut() {
            f.reset();
        }
        if let Some(v) = self.voice.as_mut() {
            v.reset();
        }
    }

    /// Takes one 30 ms frame (samples in -1..1) and returns a detection when one is
    /// final.
    pub(super) fn process_frame(&mut self, frame: &mut [f32]) -> Option<Scored> {
        if self.words.is_empty() {
            return None;
        }
        if let Some(normalizer) = self.gain.as_mut() {
            let rms = (frame.iter().map(|s| s * s).sum::<f32>() / frame.len() as f32).sqrt();
            let gain = normalizer.gain(rms);
            if gain != 1. {
                for s in frame.iter_mut() {
                    *s = (*s * gain).clamp(-1., 1.);
                }
            }
        }
        let mut new_features = std::mem::take(&mut self.new_features);
        new_features.clear();
        if let Some(features) = self.features.as_mut() {
            for part in frame.chunks_exact(SHIFT) {
                features.push_part(part, &mut new_features);
            }
        }
        // A detection resets the engine: the rest of this frame's features are dropped.
        let found = new_features
            .chunks_exact(self.size)
            .find_map(|f| self.push_features(f));
        self.new_features = new_features;
        found
    }

    fn push_features(&mut self, features: &[f32]) -> Option<Scored> {
        let should_run = self.partial.is_some()
            || self
                .voice
                .as_mut()
                .is_none_or(|gate| gate.is_voice(features));
        self.window.extend_from_slice(features);
        let full = self.window.len() >= self.window_frames * self.size;
        let result = if full && should_run {
            self.run_detection()
        } else {
            None
        };
        if self.window.len() >= self.window_frames * self.size {
            self.window.drain(..self.size);
        }
        result
    }

    fn run_detection(&mut self) -> Option<Scored> {
        self.countdown = self.countdown.saturating_sub(1);
        if let Some(partial) = self
            .partial
            .take_if(|p| self.countdown == 0 || (self.eager && p.counter >= self.min_scores))
            && partial.counter >= self.min_scores
        {
            self.reset();
            return Some(partial);
        }
        self.scratch.centred_for = None;
        let mut best: Option<Scored> = None;
        for w in 0..self.words.len() {
            if let Some(scored) = self.score_word(w)
                && best.as_ref().is_none_or(|b| scored.score > b.score)
            {
                best = Some(scored);
            }
        }
        let mut scored = best?;
        scored.counter = self.partial.as_ref().map_or(1, |p| p.counter + 1);
        match self.partial.as_mut() {
            Some(p) if p.score >= scored.score => p.counter = scored.counter,
            _ => self.partial = Some(scored),
        }
        self.countdown = self.window_frames / 2;
        None
    }

    /// The word's score on the current window, when it is over the threshold.
    fn score_word(&mut self, w: usize) -> Option<Scored> {
        let word = &self.words[w];
        let scratch = &mut self.scratch;
        let window = &self.window;
        let mut compare = |template: &Template| {
            scratch.compare(template, window, self.size, self.band, self.score_ref)
        };
        let mut avg_score = 0.;
        if let Some(average) = word.average.as_ref()
            && self.avg_threshold != 0.
        {
            avg_score = compare(average);
            if avg_score < self.avg_threshold {
                return None;
            }
        }
        let mut scores = Vec::with_capacity(word.recordings.len());
        let (mut best_score, mut best_frames) = (f32::NEG_INFINITY, 0);
        for recording in &word.recordings {
            let score = compare(recording);
            if score > best_score {
                (best_score, best_frames) = (score, recording.len);
            }
            scores.push(score);
        }
        let score = combine(self.score_mode, &mut scores);
        (score > self.threshold).then(|| Scored {
            name: word.name.clone(),
            score,
            avg_score,
            best_frames,
            counter: 0,
        })
    }
}

/// Buffers reused by every comparison.
#[derive(Default)]
struct Scratch {
    /// The window's first `centred_for` frames with their mean taken out (templates
    /// of one length share them), and their squared norms.
    centred: Vec<f32>,
    centred_norms: Vec<f32>,
    centred_for: Option<usize>,
    /// Two rows of the warping matrix.
    previous_row: Vec<f32>,
    row: Vec<f32>,
}

impl Scratch {
    /// rustpotter's comparison of a template with the window's first frames: banded
    /// dynamic time warping over cosine distances, the cost mapped to 0-1 by
    /// `score_ref`.
    fn compare(
        &mut self,
        template: &Template,
        window: &[f32],
        size: usize,
        band: usize,
        score_ref: f32,
    ) -> f32 {
        let n = template.len.min(window.len() / size);
        self.centre(window, n, size);
        let m = template.len;
        let cost = if m < 2 {
            // rustpotter reads the cost from row m - 1, which for m = 1 is the unfilled
            // top row.
            f32::INFINITY
        } else {
            self.warp(template, n, size, band)
        };
        let normalized = cost / (m + n) as f32;
        1. / (1. + ((normalized - score_ref) / score_ref).exp())
    }

    /// Takes the mean over the window's first `n` frames out of each of them.
    fn centre(&mut self, window: &[f32], n: usize, size: usize) {
        if self.centred_for == Some(n) {
            return;
        }
        let frames = &window[..n * size];
        let mut sum = vec![0f32; size];
        for frame in frames.chunks_exact(size) {
            for (s, v) in sum.iter_mut().zip(frame) {
                *s += v;
            }
        }
        self.centred.clear();
        for frame in frames.chunks_exact(size) {
            self.centred
                .extend(frame.iter().zip(&sum).map(|(v, s)| v - s / n as f32));
        }
        self.centred_norms.clear();
        self.centred_norms
            .extend(self.centred.chunks_exact(size).map(squared_norm));
        self.centred_for = Some(n);
    }

    /// The warping cost between the template (rows) and the centred window (columns),
    /// at row m - 1 and the last column, where rustpotter reads it; cells further than
    /// the band from the diagonal stay infinite.
    fn warp(&mut self, template: &Template, n: usize, size: usize, band: usize) -> f32 {
        let m = template.len;
        let band = band.max(m.abs_diff(n));
        let (previous, row) = (&mut self.previous_row, &mut self.row);
        previous.clear();
        previous.resize(n + 1, f32::INFINITY);
        previous[0] = 0.;
        for i in 1..m {
            row.clear();
            row.resize(n + 1, f32::INFINITY);
            let a = &template.frames[(i - 1) * size..i * size];
            let a_norm = template.norms[i - 1];
            let first = if i > band { (i - band).max(1) } else { 1 };
            for j in first..(n + 1).min(i + band) {
                let b = &self.centred[(j - 1) * size..j * size];
                let mut dot = 0.;
                for (x, y) in a.iter().zip(b) {
                    dot += x * y;
                }
                let magnitude = (a_norm * self.centred_norms[j - 1]).sqrt();
                let similarity = if magnitude == 0. { 0. } else { dot / magnitude };
                row[j] = (1. - similarity) + previous[j].min(row[j - 1]).min(previous[j - 1]);
            }
            std::mem::swap(previous, row);
        }
        previous[n]
    }
}

/// Combines the per-recording scores as rustpotter's score modes do.
fn combine(mode: ScoreMode, scores: &mut [f32]) -> f32 {
    let percentile = |sorted: &[f32], p: f32| {
        let index = p / 100.0 * (sorted.len() - 1) as f32;
        let floor = index.floor();
        if floor == index {
            sorted[index as usize]
        } else {
            let i = floor as usize;
            let d = index - floor;
            sorted[i] * (1.0 - d) + sorted[i + 1] * d
        }
    };
    let p = match mode {
        ScoreMode::Average => return scores.iter().sum::<f32>() / scores.len() as f32,
        ScoreMode::Max => return scores.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        ScoreMode::Median => 50.,
        ScoreMode::P25 => 25.,
        ScoreMode::P75 => 75.,
        ScoreMode::P80 => 80.,
        ScoreMode::P90 => 90.,
        ScoreMode::P95 => 95.,
    };
    scores.sort_by(f32::total_cmp);
    percentile(scores, p)
}
