//! Text from outside the process (peers, the hub, callers) on its way to a person.
//!
//! A terminal obeys escape sequences, and bidirectional overrides reorder what a person
//! reads, so text that someone else wrote loses them before it is kept, shown, spoken
//! or logged: one rule for every source, applied where the text arrives. Device names,
//! which peers choose, also get their one key form here, and names people typed or
//! said are compared with the typos they make ([`edit_distance`]).

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

/// Edit distance (insertions, deletions, substitutions and swaps of neighbours, the
/// usual typos), case-insensitive.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().flat_map(char::to_lowercase).collect();
    let b: Vec<char> = b.chars().flat_map(char::to_lowercase).collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        d[i * width] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(width) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
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
