//! Heard words as the voice loop compares them: a stop phrase, a yes or no to a
//! confirmation, whether a request sounds finished. Whisper's transcripts differ in case,
//! punctuation and politeness from one decode to the next; compared after this, "Stop!"
//! and "stop, please" are the same answer.

/// Lowercase words without punctuation, for comparing with stop phrases.
pub fn normalize(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '\'' {
                c
            } else {
                ' '
            }
        })
        .collect::<String>()
        .split_whitespace()
        .filter(|w| *w != "please")
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_phrases_match_without_case_punctuation_or_please() {
        assert_eq!(normalize("Stop!"), "stop");
        assert_eq!(normalize("Never mind, please."), "never mind");
        assert_eq!(normalize("Don't stop"), "don't stop");
    }
}
