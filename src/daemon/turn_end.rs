//! Whether the words so far sound like a finished request, for the end of a command.
//!
//! Silence alone cannot tell "set a timer for ... ten minutes" from "set a timer for
//! ten minutes": a short hangover cuts the first off, a long one makes every answer
//! late (see `vad`). People who pause mid-sentence almost always stop on a word that
//! needs more after it (an article, a preposition, a conjunction, a possessive, "um"),
//! or whisper marks the trailing off itself ("Turn on the...", "and,"). So a command
//! sounds unfinished when its transcript ends that way, in English, German, French or
//! Spanish, or when whisper was unsure of the last word (it tends to end a cut-off
//! sentence with a word of its own), and finished otherwise: a request that ends on a noun or a verb ends
//! quickly, the common case. An empty transcript (noise) counts as finished: waiting
//! longer would not give it words.

use super::words::normalize;

/// Words a request does not end on (as [`normalize`] leaves them). Kept to words that
/// hardly ever end a request in their language; not here: "on" ("turn the light on"),
/// "please", "is" ("what day it is"), object pronouns ("call her", "fais-le"), and
/// "an" with the other German separable prefixes ("mach das Licht an").
#[rustfmt::skip]
const UNFINISHED: &[&str] = &[
    // English: articles, possessives, prepositions, conjunctions, fillers.
    "a", "the", "my", "your", "our", "their", "to", "for", "of", "with", "from", "into",
    "at", "by", "about", "than", "and", "or", "but", "because", "if", "when", "um", "uh",
    "erm", "hmm", "what's",
    // German
    "der", "die", "das", "den", "dem", "des", "ein", "eine", "einen", "einem", "einer",
    "mein", "meine", "meinen", "dein", "deine", "zu", "zum", "zur", "für", "von", "vom",
    "im", "in", "auf", "und", "oder", "aber", "weil", "wenn", "dass", "ähm", "äh",
    // French
    "la", "les", "un", "une", "de", "mon", "ma", "mes", "ton", "ta", "à", "au", "aux",
    "pour", "avec", "dans", "sur", "et", "ou", "mais", "parce", "que", "euh",
    // Spanish
    "el", "los", "las", "unos", "unas", "del", "al", "mi", "mis", "tus", "su", "para",
    "con", "en", "por", "y", "o", "pero", "porque",
];

/// Below this, the decoder was unsure of the last word: perhaps one it made up to end
/// a cut-off sentence. Measured on espeak-ng commands with tiny.en: made-up endings
/// ("turn off the light send.", "tell the kitchen art.") scored 0.28-0.35, the last
/// words of whole commands 0.4-1.0, most over 0.7.
pub const UNSURE_LAST_WORD: f32 = 0.36;

/// Whether a command whose words so far are `transcript` sounds like a whole request
/// (see the module docs); `last_word_probability` as whisper gave it.
pub fn sounds_finished(transcript: &str, last_word_probability: f32) -> bool {
    if last_word_probability < UNSURE_LAST_WORD {
        return false;
    }
    let trimmed = transcript.trim_end();
    // Whisper's own marks of speech that trails off or goes on.
    if trimmed.ends_with("...")
        || trimmed.ends_with('…')
        || trimmed.ends_with(',')
        || trimmed.ends_with('-')
        || trimmed.ends_with(';')
        || trimmed.ends_with(':')
    {
        return false;
    }
    let words = normalize(trimmed);
    let Some(last) = words.split_whitespace().last() else {
        return true;
    };
    !UNFINISHED.contains(&last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_that_stop_on_a_word_needing_more_sound_unfinished() {
        for unfinished in [
            "Set a timer for",
            "Turn on the",
            "What is the weather like in Paris and",
            "Turn on the...",
            "Remind me to call my mother,",
            "Um",
            "Stell einen Timer für",
            "Mach das Licht im",
            "Mets un minuteur de",
            "Allume la lumière dans la",
            "Pon un temporizador para",
            "¿Qué tiempo hace en",
        ] {
            assert!(!sounds_finished(unfinished, 0.9), "{unfinished:?}");
        }
    }

    #[test]
    fn whole_requests_sound_finished() {
        for finished in [
            "Set a timer for ten minutes.",
            "Turn the light on.",
            "Stop.",
            "What time is it?",
            "Yes.",
            "",
            "Mach das Licht an.",
            "Wie spät ist es in Tokio?",
            "Quelle heure est-il ?",
            "¿Qué hora es?",
            "Turn on the kitchen light",
            "Turn on the light please",
            "What is the weather like",
            "Do you know what day it is",
            "Oui, fais-le.",
            "Was machst du",
        ] {
            assert!(sounds_finished(finished, 0.9), "{finished:?}");
            assert!(
                !sounds_finished(finished, 0.2),
                "{finished:?}: an unsure last word"
            );
        }
    }
}
