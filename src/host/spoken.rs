//! What skills hand to the voice loop: something to say, a cue, an announcement, a
//! timer that came due. One bounded queue carries them all, so the voice loop says them
//! one after another in the order they came, and a skill that talks in a loop is told
//! the queue is full instead of growing it.

use super::schedule::Due;
use crate::audio::cues::Cue;

/// Something for the voice loop to say or play.
#[derive(Debug, Clone, PartialEq)]
pub enum Spoken {
    /// A skill's `say(text)`: spoken after the reply in progress.
    Say(String),
    /// A skill's `cue(name)`.
    Cue(Cue),
    /// An announcement (here, or from another room): a chime, then the text.
    Announce(String),
    /// A scheduled entry came due: ring it until stopped.
    Due(Due),
}

/// How many [`Spoken`] items may wait for the voice loop; `say` past it fails rather
/// than queueing without bound.
pub const SPEECH_QUEUE: usize = 32;

impl From<Due> for Spoken {
    fn from(due: Due) -> Spoken {
        Spoken::Due(due)
    }
}
