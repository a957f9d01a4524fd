//! Yes or no, from a spoken answer to "Shall I ...?".
//!
//! A `@confirm` function runs only on a clear yes: the answer is matched word by word
//! (case and punctuation ignored) against short lists in English, German, French and
//! Spanish. A no-word anywhere wins over a yes-word ("yes... no, don't"), because
//! running something the person did not want is the worse mistake; anything else,
//! silence included, is not a yes either.

use super::words::normalize;

/// Words and phrases that agree (as [`normalize`] leaves them: lower case, `-` as a
/// space, apostrophes kept).
pub const YES: [&str; 41] = [
    // English
    "yes",
    "yeah",
    "yep",
    "yup",
    "sure",
    "okay",
    "ok",
    "alright",
    "all right",
    "do it",
    "go ahead",
    "of course",
    "confirm",
    // German
    "ja",
    "jawohl",
    "genau",
    "klar",
    "gerne",
    "mach das",
    "mach es",
    "mach's",
    "in ordnung",
    // French
    "oui",
    "ouais",
    "d'accord",
    "daccord",
    "vas y",
    "allez y",
    "bien sûr",
    "fais le",
    "volontiers",
    // Spanish
    "sí",
    "si",
    "claro",
    "vale",
    "hazlo",
    "de acuerdo",
    "por supuesto",
    "adelante",
    "venga",
    "dale",
];

/// Words and phrases that refuse; one of them anywhere makes the answer a no.
pub const NO: [&str; 23] = [
    // English
    "no",
    "nope",
    "nah",
    "not",
    "don't",
    "do not",
    "never",
    "cancel",
    "stop",
    // German
    "nein",
    "nicht",
    "nee",
    "auf keinen fall",
    "lass das",
    // French
    "non",
    "pas",
    "jamais",
    "annule",
    // Spanish
    "nunca",
    "jamás",
    "ni hablar",
    "cancela",
    "mejor no",
];

/// What a spoken answer meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A yes-word and no no-word.
    Yes,
    /// A no-word.
    No,
    /// Neither (or nothing was said): taken as a no.
    Unclear,
}

impl Answer {
    /// Whether the call may run.
    pub fn allows(self) -> bool {
        self == Answer::Yes
    }

    /// How the answer is shown and logged.
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Yes => "yes",
            Answer::No => "no",
            Answer::Unclear => "not understood (a no)",
        }
    }
}

/// Judges a (cleaned) transcript of the answer.
pub fn judge(transcript: &str) -> Answer {
    let normal = normalize(transcript);
    let words: Vec<&str> = normal.split(' ').filter(|w| !w.is_empty()).collect();
    let said = |phrase: &&str| {
        let phrase: Vec<&str> = phrase.split(' ').collect();
        words.windows(phrase.len()).any(|w| w == phrase.as_slice())
    };
    if NO.iter().any(said) {
        Answer::No
    } else if YES.iter().any(said) {
        Answer::Yes
    } else {
        Answer::Unclear
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn english_yes_and_no() {
        for yes in ["Yes.", "Yeah, sure!", "Okay", "Do it.", "Go ahead, please."] {
            assert_eq!(judge(yes), Answer::Yes, "{yes}");
        }
        for no in ["No.", "Nope", "Don't do it.", "Please do not.", "Never!"] {
            assert_eq!(judge(no), Answer::No, "{no}");
        }
    }

    #[test]
    fn german_yes_and_no() {
        for yes in ["Ja.", "Jawohl!", "Genau", "Ja, mach das.", "In Ordnung"] {
            assert_eq!(judge(yes), Answer::Yes, "{yes}");
        }
        for no in ["Nein.", "Lieber nicht.", "Nee", "Auf keinen Fall!"] {
            assert_eq!(judge(no), Answer::No, "{no}");
        }
    }

    #[test]
    fn french_yes_and_no() {
        for yes in ["Oui.", "D'accord", "Vas-y !", "Oui, bien sûr.", "Allez-y"] {
            assert_eq!(judge(yes), Answer::Yes, "{yes}");
        }
        for no in ["Non.", "Surtout pas.", "Jamais", "Non merci"] {
            assert_eq!(judge(no), Answer::No, "{no}");
        }
    }

    #[test]
    fn spanish_yes_and_no() {
        for yes in ["Sí.", "Claro", "Vale, hazlo.", "De acuerdo", "¡Adelante!"] {
            assert_eq!(judge(yes), Answer::Yes, "{yes}");
        }
        for no in ["No.", "Nunca", "¡Ni hablar!", "Mejor no."] {
            assert_eq!(judge(no), Answer::No, "{no}");
        }
    }

    #[test]
    fn no_wins_and_anything_else_is_not_a_yes() {
        assert_eq!(judge("Yes... no, wait."), Answer::No);
        assert_eq!(judge("Ja, nein, doch nicht"), Answer::No);
        assert_eq!(judge("Oui, non"), Answer::No);
        assert_eq!(judge(""), Answer::Unclear);
        assert_eq!(judge("What is the weather like?"), Answer::Unclear);
        // Words that merely contain a yes-word are not one.
        assert_eq!(judge("Jasmine tea, yesterday"), Answer::Unclear);
        assert!(!judge("maybe later").allows());
        assert!(judge("yes").allows());
    }
}
