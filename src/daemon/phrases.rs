//! What the spoke says in its own words, in the language the person spoke.
//!
//! Replies come from the model, which answers in the user's language; these few
//! sentences come from the spoke itself (a failure, a confirmation question), so they
//! are kept here in every language the spoke is documented to speak. A language not
//! listed gets English, which is better than silence.

/// Languages with their own phrases (Whisper's codes).
pub const LANGUAGES: [&str; 4] = ["en", "de", "fr", "es"];

/// A sentence the spoke says on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phrase {
    /// A turn failed (the hub, the model code, a skill).
    DidntWork,
    /// Speech to text failed on a command.
    DidntCatch,
}

/// `phrase` in `language` (a Whisper code such as `de`), or in English.
pub fn say(phrase: Phrase, language: &str) -> &'static str {
    match (phrase, language) {
        (Phrase::DidntWork, "de") => "Entschuldigung, das hat nicht geklappt.",
        (Phrase::DidntWork, "fr") => "Désolé, ça n'a pas marché.",
        (Phrase::DidntWork, "es") => "Lo siento, no ha funcionado.",
        (Phrase::DidntWork, _) => "Sorry, that didn't work.",
        (Phrase::DidntCatch, "de") => "Entschuldigung, das habe ich nicht verstanden.",
        (Phrase::DidntCatch, "fr") => "Pardon, je n'ai pas compris.",
        (Phrase::DidntCatch, "es") => "Perdona, no te he entendido.",
        (Phrase::DidntCatch, _) => "Sorry, I didn't catch that.",
    }
}

/// The confirmation question for `request` (what the call does, in the words of the
/// skill's summary: "delete every note in a list, with list name shopping").
pub fn confirm(request: &str, language: &str) -> String {
    match language {
        "de" => format!("Soll ich das tun: {request}?"),
        "fr" => format!("Dois-je faire ceci : {request} ?"),
        "es" => format!("¿Hago esto: {request}?"),
        _ => format!("Shall I {request}?"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_has_its_own_words() {
        for phrase in [Phrase::DidntWork, Phrase::DidntCatch] {
            let said: Vec<&str> = LANGUAGES.iter().map(|l| say(phrase, l)).collect();
            for (i, a) in said.iter().enumerate() {
                assert!(said[i + 1..].iter().all(|b| a != b), "{phrase:?}: {said:?}");
            }
            assert_eq!(say(phrase, "xx"), say(phrase, "en"));
        }
        let asked: Vec<String> = LANGUAGES
            .iter()
            .map(|l| confirm("open the door", l))
            .collect();
        assert_eq!(asked[0], "Shall I open the door?");
        assert!(
            asked.iter().all(|q| q.contains("open the door")),
            "{asked:?}"
        );
        assert!(asked[1].starts_with("Soll ich"), "{asked:?}");
    }
}
