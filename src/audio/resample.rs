//! Sample-rate conversion to (or from) 16 kHz, in one go or as a stream.
//!
//! Why a windowed-sinc filter of our own: Whisper, the wake word and the VAD all want
//! 16 kHz, while sound cards and recordings come at 44.1/48/22.05 kHz. A Hann-windowed
//! sinc low-pass at 95% of the lower Nyquist frequency is clean enough that transcripts
//! do not depend on the input rate, and cheap at these rates. The streaming form keeps
//! just the input samples the kernel still needs, so a microphone can be converted
//! chunk by chunk with exactly the output the one-go form gives for the whole recording.
//!
//! Rates outside [`MIN_RATE`]..=[`MAX_RATE`] are refused: the work and the output grow
//! with the ratio of the two rates, so a file or a device claiming 1 Hz would make a
//! 16 kHz conversion allocate its input 16,000 times over.

/// Zero crossings of the sinc kernel on each side, at the lower of the two rates.
const KERNEL_ZEROS: f64 = 16.0;

/// Rate pairs needing at most this many kernel phases (44.1 -> 16 kHz needs 160,
/// 11.025 -> 16 kHz 640) get their weights computed once; a live microphone then costs
/// one multiply-add per tap instead of a sine and a cosine, which matters because the
/// conversion runs in the audio callback.
const MAX_TABLE_PHASES: u64 = 1024;

/// Lowest sample rate converted: below telephone quality nothing is left of speech.
pub const MIN_RATE: u32 = 4_000;

/// Highest sample rate converted: the fastest studio rate (384 kHz).
pub const MAX_RATE: u32 = 384_000;

/// A sample rate the resampler refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("a sample rate of {rate} Hz is not supported; rates from {MIN_RATE} to {MAX_RATE} Hz are")]
pub struct RateError {
    /// The refused rate.
    pub rate: u32,
}

/// `Ok` when `rate` is one the resampler converts.
pub fn check_rate(rate: u32) -> Result<(), RateError> {
    if (MIN_RATE..=MAX_RATE).contains(&rate) {
        Ok(())
    } else {
        Err(RateError { rate })
    }
}

/// Precomputed kernel weights, one row per phase of the output grid against the input.
#[derive(Debug, Clone)]
struct Table {
    /// Output sample `n` sits at input position `n * up_m / down_l`.
    up_m: u64,
    down_l: u64,
    /// Per phase: the first tap's offset from the position's integer part, and the
    /// weights, normalised to sum to 1.
    rows: Vec<(i64, Vec<f32>)>,
}

/// A streaming resampler from `from` Hz to `to` Hz.
#[derive(Debug, Clone)]
pub struct Resampler {
    /// Input samples per output sample.
    step: f64,
    /// Cut-off in cycles per input sample.
    cutoff: f64,
    /// Half the kernel's width, in input samples.
    half_width: f64,
    /// Input not yet fully used; `pending[0]` is input sample number `base`.
    pending: Vec<f32>,
    base: u64,
    /// Index of the next output sample.
    next: u64,
    passthrough: bool,
    table: Option<Table>,
}

impl Resampler {
    /// A resampler from `from` Hz to `to` Hz (equal rates pass samples through); either
    /// rate outside [`MIN_RATE`]..=[`MAX_RATE`] is refused.
    pub fn new(from: u32, to: u32) -> Result<Resampler, RateError> {
        check_rate(from)?;
        check_rate(to)?;
        let passthrough = from == to;
        let scale = if passthrough {
            1.0
        } else {
            (f64::from(to) / f64::from(from)).min(1.0)
        };
        let mut resampler = Resampler {
            step: if passthrough {
                1.0
            } else {
                f64::from(from) / f64::from(to)
            },
            cutoff: 0.5 * scale * 0.95,
            half_width: KERNEL_ZEROS / scale,
            pending: Vec::new(),
            base: 0,
            next: 0,
            passthrough,
            table: None,
        };
        if !passthrough {
            resampler.table = resampler.build_table(from, to);
        }
        Ok(resampler)
    }

    fn build_table(&self, from: u32, to: u32) -> Option<Table> {
        let g = gcd(u64::from(from), u64::from(to));
        let (up_m, down_l) = (u64::from(from) / g, u64::from(to) / g);
        if down_l > MAX_TABLE_PHASES {
            return None;
        }
        let rows = (0..down_l)
            .map(|p| {
                let frac = p as f64 / down_l as f64;
                let first = (frac - self.half_width).ceil() as i64;
                let last = (frac + self.half_width).floor() as i64;
                let weights: Vec<f64> = (first..=last)
                    .map(|j| self.weight(frac - j as f64))
                    .collect();
                let sum: f64 = weights.iter().sum();
                let norm = if sum.abs() > 1e-9 { sum } else { 1.0 };
                (first, weights.iter().map(|w| (w / norm) as f32).collect())
            })
            .collect();
        Some(Table { up_m, down_l, rows })
    }

    /// The kernel at distance `d` input samples from the output position.
    fn weight(&self, d: f64) -> f64 {
        let window = 0.5 + 0.5 * (std::f64::consts::PI * d / self.half_width).cos();
        let arg = 2.0 * self.cutoff * d;
        let sinc = if arg.abs() < 1e-12 {
            1.0
        } else {
            (std::f64::consts::PI * arg).sin() / (std::f64::consts::PI * arg)
        };
        2.0 * self.cutoff * sinc * window
    }

    /// Feeds input and appends every output sample it completes to `out`. The output
    /// lags the input by half the kernel (about 1 ms at 16 kHz).
    pub fn push(&mut self, input: &[f32], out: &mut Vec<f32>) {
        if self.passthrough {
            out.extend_from_slice(input);
            return;
        }
        self.pending.extend_from_slice(input);
        let end = self.base + self.pending.len() as u64;
        loop {
            let t = self.next as f64 * self.step;
            if (t + self.half_width).floor() as u64 >= end {
                break;
            }
            out.push(
                self.interior_sample(t)
                    .unwrap_or_else(|| self.sample_at(t, end)),
            );
            self.next += 1;
        }
        self.drop_used();
    }

    /// Output `next` from the table, when there is one and every tap is at hand.
    fn interior_sample(&self, t: f64) -> Option<f32> {
        let table = self.table.as_ref()?;
        if t - self.half_width < self.base as f64 {
            return None;
        }
        let position = self.next * table.up_m;
        let (whole, phase) = (position / table.down_l, position % table.down_l);
        let (first, weights) = &table.rows[phase as usize];
        let start = usize::try_from(whole as i64 + first - self.base as i64).ok()?;
        let taps = self.pending.get(start..start + weights.len())?;
        Some(taps.iter().zip(weights).map(|(x, w)| x * w).sum())
    }

    /// Ends the stream: the outputs that need input past its end, computed from what
    /// there is (so `input.len() * to / from` samples in all, rounded down).
    pub fn finish(&mut self, out: &mut Vec<f32>) {
        if self.passthrough {
            return;
        }
        let end = self.base + self.pending.len() as u64;
        let total = (end as f64 / self.step).floor() as u64;
        while self.next < total {
            let t = self.next as f64 * self.step;
            out.push(self.sample_at(t, end));
            self.next += 1;
        }
        self.drop_used();
    }

    fn sample_at(&self, t: f64, end: u64) -> f32 {
        let first = (t - self.half_width).ceil().max(0.0) as u64;
        let first = first.max(self.base);
        let last = ((t + self.half_width).floor() as u64).min(end.saturating_sub(1));
        let mut acc = 0.0f64;
        let mut norm = 0.0f64;
        for k in first..=last {
            let x = self.pending[(k - self.base) as usize];
            let h = self.weight(t - k as f64);
            acc += f64::from(x) * h;
            norm += h;
        }
        // Normalising by the kernel's sum keeps DC gain at 1, at the edges too.
        if norm.abs() > 1e-9 {
            (acc / norm) as f32
        } else {
            0.0
        }
    }

    /// Forgets input the next output no longer reaches.
    fn drop_used(&mut self) {
        let t = self.next as f64 * self.step;
        let needed = (t - self.half_width).ceil().max(0.0) as u64;
        let used = needed
            .saturating_sub(self.base)
            .min(self.pending.len() as u64);
        self.pending.drain(..used as usize);
        self.base += used;
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Resamples mono audio from `from` Hz to `to` Hz in one go.
pub fn resample(input: &[f32], from: u32, to: u32) -> Result<Vec<f32>, RateError> {
    let mut resampler = Resampler::new(from, to)?;
    let mut out = Vec::with_capacity(input.len() * to as usize / from as usize + 1);
    resampler.push(input, &mut out);
    resampler.finish(&mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(freq: f64, rate: u32, seconds: f64) -> Vec<f32> {
        (0..(f64::from(rate) * seconds) as usize)
            .map(|i| (2.0 * std::f64::consts::PI * freq * i as f64 / f64::from(rate)).sin() as f32)
            .collect()
    }

    fn rms(x: &[f32]) -> f64 {
        (x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / x.len() as f64).sqrt()
    }

    #[test]
    fn resampling_keeps_speech_band_and_drops_what_cannot_be_represented() {
        // 1 kHz survives 48 kHz -> 16 kHz at full level and at the right frequency.
        let out = resample(&tone(1000.0, 48_000, 1.0), 48_000, 16_000).unwrap();
        assert_eq!(out.len(), 16_000);
        let expected = tone(1000.0, 16_000, 1.0);
        let err: f64 = out[1000..15_000]
            .iter()
            .zip(&expected[1000..15_000])
            .map(|(a, b)| f64::from(a - b).abs())
            .fold(0.0, f64::max);
        assert!(err < 0.01, "max error {err}");
        // 12 kHz cannot exist at 16 kHz: it must be filtered, not aliased to 4 kHz.
        let aliased = resample(&tone(12_000.0, 48_000, 1.0), 48_000, 16_000).unwrap();
        assert!(rms(&aliased[1000..15_000]) < 0.01, "{}", rms(&aliased));
        // Upsampling keeps the level too.
        let up = resample(&tone(440.0, 8_000, 1.0), 8_000, 16_000).unwrap();
        assert_eq!(up.len(), 16_000);
        assert!((rms(&up[1000..15_000]) - std::f64::consts::FRAC_1_SQRT_2).abs() < 0.01);
    }

    #[test]
    fn streaming_in_odd_chunks_equals_one_go() {
        let input = tone(440.0, 44_100, 0.5);
        let whole = resample(&input, 44_100, 16_000).unwrap();
        let mut r = Resampler::new(44_100, 16_000).unwrap();
        let mut streamed = Vec::new();
        for chunk in input.chunks(337) {
            r.push(chunk, &mut streamed);
        }
        // Live audio never finishes: all but the last kernel's worth is out already.
        assert!(streamed.len() + 20 >= whole.len(), "{}", streamed.len());
        r.finish(&mut streamed);
        assert_eq!(streamed.len(), whole.len());
        let diff = streamed
            .iter()
            .zip(&whole)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(diff < 1e-6, "{diff}");
        // Memory stays bounded: only the kernel's reach is kept.
        assert!(r.pending.len() < 200, "{}", r.pending.len());
    }

    #[test]
    fn table_and_direct_kernels_agree() {
        for (from, to) in [
            (44_100, 16_000),
            (48_000, 16_000),
            (11_025, 16_000),
            (22_050, 16_000),
        ] {
            let input = tone(700.0, from, 0.3);
            let mut with_table = Resampler::new(from, to).unwrap();
            assert!(with_table.table.is_some(), "{from}");
            let mut direct = with_table.clone();
            direct.table = None;
            let (mut a, mut b) = (Vec::new(), Vec::new());
            with_table.push(&input, &mut a);
            direct.push(&input, &mut b);
            assert_eq!(a.len(), b.len());
            let diff = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max);
            assert!(diff < 1e-5, "{from} -> {to}: {diff}");
        }
    }

    #[test]
    fn absurd_rates_are_refused_before_any_work() {
        for (from, to) in [
            (1, 16_000),
            (0, 16_000),
            (16_000, 1),
            (3_999, 16_000),
            (400_000, 16_000),
        ] {
            let err = resample(&[0.0; 4], from, to).unwrap_err();
            assert!(err.rate == from || err.rate == to, "{from} -> {to}: {err}");
            assert!(err.to_string().contains("4000 to 384000 Hz"), "{err}");
        }
        assert_eq!(resample(&[0.5; 4], 4_000, 4_000).unwrap(), vec![0.5; 4]);
        assert!(Resampler::new(384_000, 4_000).is_ok());
    }
}
