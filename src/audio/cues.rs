//! Short tones that tell the user where the spoke is, without words: it heard the
//! wake word, it is done, something failed. Generated, not shipped as files, so they
//! cost nothing to load and follow the volume like speech does.

use std::f32::consts::TAU;

/// The rate cues are made at.
pub const CUE_RATE: u32 = 22_050;

/// Which cue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cue {
    /// The wake word was heard: listening for the command (rising two notes).
    Woke,
    /// The command was heard and handed over, or a follow-up timed out (one soft note).
    Done,
    /// The turn failed or nothing could be understood (two low notes).
    Error,
    /// A timer, alarm or reminder is due (a bright four-beep ring, unlike any other).
    Ring,
    /// An announcement follows (two falling notes, a door chime).
    Chime,
}

impl Cue {
    /// The names skills use with `cue(name)`.
    pub const NAMES: [&'static str; 5] = ["woke", "done", "error", "ring", "chime"];

    /// The cue called `name` (see [`Cue::NAMES`]).
    pub fn named(name: &str) -> Option<Cue> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "woke" => Cue::Woke,
            "done" => Cue::Done,
            "error" => Cue::Error,
            "ring" => Cue::Ring,
            "chime" => Cue::Chime,
            _ => return None,
        })
    }

    /// The cue's samples at [`CUE_RATE`], peaking at about half scale.
    pub fn samples(self) -> Vec<f32> {
        match self {
            Cue::Woke => [tone(660.0, 0.07), tone(880.0, 0.09)].concat(),
            Cue::Done => tone(520.0, 0.09),
            Cue::Error => [tone(330.0, 0.12), silence(0.05), tone(262.0, 0.16)].concat(),
            Cue::Ring => {
                let beep = [tone(1320.0, 0.08), silence(0.04), tone(1320.0, 0.08)].concat();
                [
                    beep.clone(),
                    silence(0.25),
                    beep.clone(),
                    silence(0.25),
                    beep,
                ]
                .concat()
            }
            Cue::Chime => [tone(784.0, 0.18), silence(0.03), tone(523.0, 0.3)].concat(),
        }
    }
}

/// A sine tone with 10 ms fades, so it starts and ends without a click.
fn tone(hz: f32, secs: f32) -> Vec<f32> {
    let n = (secs * CUE_RATE as f32) as usize;
    let fade = (0.01 * CUE_RATE as f32) as usize;
    (0..n)
        .map(|i| {
            let envelope = (i.min(n - 1 - i) as f32 / fade as f32).min(1.0);
            0.5 * envelope * (TAU * hz * i as f32 / CUE_RATE as f32).sin()
        })
        .collect()
}

fn silence(secs: f32) -> Vec<f32> {
    vec![0.0; (secs * CUE_RATE as f32) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cues_are_short_distinct_and_click_free() {
        let cues = [Cue::Woke, Cue::Done, Cue::Error, Cue::Ring, Cue::Chime].map(Cue::samples);
        for cue in &cues {
            let secs = cue.len() as f32 / CUE_RATE as f32;
            assert!((0.05..1.5).contains(&secs), "{secs} s");
            assert!(cue[0].abs() < 0.01 && cue[cue.len() - 1].abs() < 0.05);
            assert!(cue.iter().all(|s| s.abs() <= 0.5));
        }
        assert_ne!(cues[0].len(), cues[1].len());
        assert_ne!(cues[1].len(), cues[2].len());
        let lengths: std::collections::HashSet<usize> = cues.iter().map(Vec::len).collect();
        assert_eq!(
            lengths.len(),
            cues.len(),
            "every cue is told apart by its length"
        );
        for name in Cue::NAMES {
            assert!(Cue::named(name).is_some());
        }
    }
}
