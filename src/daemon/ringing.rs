//! A due timer ringing: the ring cue and its lines, again after [`RING_GAP`] of quiet,
//! until someone says "stop" or `timers.ring_ms` runs out.
//!
//! Plain logic over instants: the conversation task asks it what to do at each tick and
//! does the playing, so the timing rules are tested here without audio.

use std::time::{Duration, Instant};

/// Silence between two rings of a due timer.
pub const RING_GAP: Duration = Duration::from_secs(2);

/// Under this much ring left, nobody could finish saying "stop": no new listening window.
const SHORTEST_WINDOW: Duration = Duration::from_secs(1);

/// Due timers ringing until stopped.
#[derive(Debug)]
pub(super) struct Ringing {
    /// What is said at each ring.
    lines: Vec<String>,
    /// When it stops by itself.
    until: Instant,
    /// Since when the last ring has been quiet.
    quiet_since: Option<Instant>,
    /// How many times it has rung.
    rings: u32,
}

/// What a ring needs at a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RingStep {
    /// Still playing, or quiet for less than [`RING_GAP`].
    Wait,
    /// Quiet long enough: ring again ([`Ringing::rang`] first).
    Again,
    /// Its time is up: nobody stopped it.
    Over,
}

impl Ringing {
    /// Starts ringing `line` for `length` from `now` (the first ring is due at once).
    pub(super) fn new(line: String, now: Instant, length: Duration) -> Ringing {
        Ringing {
            lines: vec![line],
            until: now + length,
            quiet_since: None,
            rings: 0,
        }
    }

    /// Another timer came due meanwhile: it is said at the next ring.
    pub(super) fn add(&mut self, line: String) {
        self.lines.push(line);
    }

    /// A ring starts now: what to say after the cue, and which ring it is (1 first).
    pub(super) fn rang(&mut self) -> (&[String], u32) {
        self.quiet_since = None;
        self.rings += 1;
        (&self.lines, self.rings)
    }

    /// The lines it rings with.
    pub(super) fn lines(&self) -> &[String] {
        &self.lines
    }

    /// What to do at `now`, the speaker being `playing` or not.
    pub(super) fn tick(&mut self, now: Instant, playing: bool) -> RingStep {
        if now >= self.until {
            return RingStep::Over;
        }
        if playing {
            self.quiet_since = None;
            return RingStep::Wait;
        }
        if now.duration_since(*self.quiet_since.get_or_insert(now)) >= RING_GAP {
            RingStep::Again
        } else {
            RingStep::Wait
        }
    }

    /// How long to listen for "stop" again after an utterance that was not it; none
    /// when too little of the ring is left.
    pub(super) fn window_left(&self, now: Instant) -> Option<Duration> {
        Some(self.until.saturating_duration_since(now)).filter(|left| *left >= SHORTEST_WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn it_rings_again_after_a_quiet_gap_and_never_over_its_own_sound() {
        let start = Instant::now();
        let mut ring = Ringing::new("pasta is ready".into(), start, MS(30_000));
        assert_eq!(ring.rang(), (&["pasta is ready".to_string()][..], 1));
        // Playing: never again, however long it plays.
        assert_eq!(ring.tick(start + MS(5_000), true), RingStep::Wait);
        // Quiet from 5.5 s: not yet at 7.4 s, again from 7.5 s.
        assert_eq!(ring.tick(start + MS(5_500), false), RingStep::Wait);
        assert_eq!(ring.tick(start + MS(7_400), false), RingStep::Wait);
        assert_eq!(ring.tick(start + MS(7_500), false), RingStep::Again);
        ring.add("tea is ready".into());
        let (lines, rings) = ring.rang();
        assert_eq!((lines.len(), rings), (2, 2));
        // Sound again resets the quiet.
        assert_eq!(ring.tick(start + MS(8_000), false), RingStep::Wait);
        assert_eq!(ring.tick(start + MS(9_000), true), RingStep::Wait);
        assert_eq!(ring.tick(start + MS(10_500), false), RingStep::Wait);
        assert_eq!(ring.tick(start + MS(12_400), false), RingStep::Wait);
        assert_eq!(ring.tick(start + MS(12_500), false), RingStep::Again);
    }

    #[test]
    fn it_ends_at_its_time_even_while_playing() {
        let start = Instant::now();
        let mut ring = Ringing::new("bins".into(), start, MS(10_000));
        ring.rang();
        assert_eq!(ring.tick(start + MS(9_999), true), RingStep::Wait);
        assert_eq!(ring.tick(start + MS(10_000), true), RingStep::Over);
        assert_eq!(ring.tick(start + MS(10_000), false), RingStep::Over);
    }

    #[test]
    fn a_new_window_for_stop_needs_a_second_of_ring_left() {
        let start = Instant::now();
        let ring = Ringing::new("bins".into(), start, MS(10_000));
        assert_eq!(ring.window_left(start + MS(4_000)), Some(MS(6_000)));
        assert_eq!(ring.window_left(start + MS(9_000)), Some(MS(1_000)));
        assert_eq!(ring.window_left(start + MS(9_001)), None);
        assert_eq!(ring.window_left(start + MS(12_000)), None);
    }
}
