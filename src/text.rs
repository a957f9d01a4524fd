//! Text from outside the process (peers, the hub, callers) on its way to a person.
//!
//! A terminal obeys escape sequences, and bidirectional overrides reorder what a person
//! reads, so text that someone else wrote loses them before it is kept, shown, spoken
//! or logged: one rule for every source, applied where the text arrives. Device names,
//! which peers choose, also get their one key form here.

/// Text from the network for one line (a device name, the `from` of a call): without
/// control characters (C0, C1, so no escape sequences) and bidirectional overrides,
/// which could rewrite what a person sees on a terminal or in a log.
pub fn clean_line(text: &str) -> String {
    text.chars().filter(|c| !unsafe_char(*c)).collect()
}

/// Like [`clean_line`] for prose (descriptions, docstrings): keeps line breaks and tabs.
pub fn clean_text(text: &str) -> String {
    text.chars()
        .filter(|c| matches!(c, '\n' | '\t') || !unsafe_char(*c))
        .collect()
}

fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A device name as `devices["..."]` and MQTT topics write it: lowercase ASCII
/// letters and digits, everything else folded into single `-`.
pub fn normalise(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_text_loses_control_characters() {
        assert_eq!(
            clean_line("Kit\u{1b}[2Jchen\u{9b}31m\u{202e}\n"),
            "Kit[2Jchen31m"
        );
        assert_eq!(clean_text("a\n\tb\u{7}\u{2066}"), "a\n\tb");
    }

    #[test]
    fn device_names_normalise() {
        assert_eq!(normalise("Kitchen"), "kitchen");
        assert_eq!(normalise("Living Room TV"), "living-room-tv");
        assert_eq!(normalise("  ünïcode -- box! "), "n-code-box");
    }
}
