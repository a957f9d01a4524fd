//! The pre-roll: the last second or so of audio, always kept.
//!
//! Why: the wake word fires after it has been said, and people do not pause after it,
//! so the command's first word is often already under way at the trigger. Keeping a
//! ring of recent audio lets the recording start before the trigger point and the first
//! word is never clipped. A fixed ring (no allocation per frame) because it is fed 50
//! times a second for as long as the spoke runs.

use super::Frame;

/// A ring buffer of the most recent `capacity` samples and where they end.
#[derive(Debug, Clone)]
pub struct PreRoll {
    ring: Vec<f32>,
    /// Next write index in `ring`.
    head: usize,
    /// Samples held (at most the capacity).
    len: usize,
    /// Stream position just past the newest sample.
    end: u64,
}

impl PreRoll {
    /// A pre-roll that keeps `capacity` samples (`ms_to_samples(pre_roll_ms)`).
    pub fn new(capacity: usize) -> PreRoll {
        PreRoll {
            ring: vec![0.0; capacity],
            head: 0,
            len: 0,
            end: 0,
        }
    }

    /// How many samples it keeps at most.
    pub fn capacity(&self) -> usize {
        self.ring.len()
    }

    /// Adds a frame. A gap in positions (audio lost while a device was reopened) drops
    /// what came before it, so the pre-roll is never a splice of unrelated moments.
    pub fn push(&mut self, frame: &Frame) {
        if self.len > 0 && frame.start != self.end {
            self.clear();
        }
        self.push_samples(&frame.samples);
        self.end = frame.end();
    }

    fn push_samples(&mut self, samples: &[f32]) {
        let cap = self.ring.len();
        if cap == 0 {
            return;
        }
        let samples = &samples[samples.len().saturating_sub(cap)..];
        for &s in samples {
            self.ring[self.head] = s;
            self.head = (self.head + 1) % cap;
        }
        self.len = (self.len + samples.len()).min(cap);
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// The samples held, oldest first, and the stream position of the first of them.
    pub fn contents(&self) -> (u64, Vec<f32>) {
        let cap = self.ring.len();
        let mut out = Vec::with_capacity(self.len);
        let first = (self.head + cap - self.len) % cap.max(1);
        for i in 0..self.len {
            out.push(self.ring[(first + i) % cap]);
        }
        (self.end - self.len as u64, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(start: u64, n: usize) -> Frame {
        Frame {
            start,
            samples: (0..n).map(|i| (start + i as u64) as f32).collect(),
        }
    }

    #[test]
    fn keeps_the_latest_samples_in_order() {
        let mut p = PreRoll::new(700);
        for i in 0..5 {
            p.push(&frame(i * 320, 320));
        }
        let (start, samples) = p.contents();
        assert_eq!(start, 1600 - 700);
        assert_eq!(samples.len(), 700);
        assert!(
            samples
                .iter()
                .enumerate()
                .all(|(i, &s)| s == (900 + i) as f32)
        );
    }

    #[test]
    fn partial_fill_and_gaps() {
        let mut p = PreRoll::new(1000);
        p.push(&frame(0, 320));
        assert_eq!(p.contents(), (0, frame(0, 320).samples));
        // A gap (device reopened): older audio is dropped.
        p.push(&frame(5000, 320));
        assert_eq!(p.contents(), (5000, frame(5000, 320).samples));
        // A frame larger than the ring keeps its tail.
        p.push(&frame(5320, 1500));
        let (start, samples) = p.contents();
        assert_eq!((start, samples[0]), (5820, 5820.0));
    }
}
