//! Splits a streamed reply into ordered segments: sentences of text and code blocks.
//!
//! Text is released a sentence at a time as soon as the sentence is complete, so the
//! voice can start speaking while the model is still writing. A code block is released
//! the moment its closing fence arrives, so it can run right away. Pieces may split
//! anywhere, including inside a fence (`` `` `` + `` `rhai ``), so a trailing run of
//! backticks is held back until it is known whether it opens a fence.

/// One segment of a reply, in the order the model wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A sentence (or a line) of text, trimmed.
    Text(String),
    /// The body of a fenced code block.
    Code(String),
}

/// What was left when the reply ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leftover {
    /// Nothing: every block was closed.
    None,
    /// A code block was opened and never closed; its body so far.
    UnclosedCode(String),
}

/// Incremental segmenter.
#[derive(Debug, Default)]
pub struct Segmenter {
    buffer: String,
    in_code: bool,
    /// Inside an opening fence line, waiting for its end (the language tag).
    in_fence_line: bool,
}

const FENCE: &str = "```";

impl Segmenter {
    /// Adds a piece of the reply and returns the segments it completed.
    pub fn push(&mut self, piece: &str) -> Vec<Segment> {
        self.buffer.push_str(piece);
        let mut out = Vec::new();
        loop {
            let progressed = if self.in_fence_line {
                self.skip_fence_line()
            } else if self.in_code {
                self.close_code(&mut out)
            } else {
                self.text(&mut out)
            };
            if !progressed {
                return out;
            }
        }
    }

    /// Ends the reply: the remaining text is a last sentence; an open block is reported.
    pub fn finish(&mut self) -> (Vec<Segment>, Leftover) {
        let rest = std::mem::take(&mut self.buffer);
        let mut out = Vec::new();
        if self.in_code || self.in_fence_line {
            self.in_code = false;
            self.in_fence_line = false;
            return (out, Leftover::UnclosedCode(rest.trim().to_string()));
        }
        push_sentences(&mut out, &rest);
        (out, Leftover::None)
    }

    /// In text: releases complete sentences and stops at an opening fence.
    fn text(&mut self, out: &mut Vec<Segment>) -> bool {
        if let Some(at) = self.buffer.find(FENCE) {
            let before: String = self.buffer.drain(..at + FENCE.len()).collect();
            push_sentences(out, &before[..at]);
            self.in_fence_line = true;
            return true;
        }
        // Hold back trailing backticks: they may be the start of a fence.
        let held = self.buffer.len() - self.buffer.trim_end_matches('`').len();
        let usable = self.buffer.len() - held;
        let Some(end) = last_sentence_end(&self.buffer[..usable]) else {
            return false;
        };
        let done: String = self.buffer.drain(..end).collect();
        push_sentences(out, &done);
        false
    }

    /// Drops the rest of an opening fence line (` rhai\n`).
    fn skip_fence_line(&mut self) -> bool {
        match self.buffer.find('\n') {
            Some(end) => {
                self.buffer.drain(..=end);
                self.in_fence_line = false;
                self.in_code = true;
                true
            }
            None => false,
        }
    }

    /// In code: releases the block once a line starts with the closing fence.
    fn close_code(&mut self, out: &mut Vec<Segment>) -> bool {
        let mut line_start = 0;
        loop {
            let line = &self.buffer[line_start..];
            let trimmed = line.trim_start_matches([' ', '\t']);
            if trimmed.starts_with(FENCE) {
                let fence_at = line_start + (line.len() - trimmed.len());
                let code = self.buffer[..line_start].trim_end().to_string();
                self.buffer.drain(..fence_at + FENCE.len());
                // The rest of the closing fence line is never text.
                let rest = self.buffer.trim_start_matches('`');
                let cut = self.buffer.len() - rest.len();
                self.buffer.drain(..cut);
                self.in_code = false;
                out.push(Segment::Code(code));
                return true;
            }
            match line.find('\n') {
                Some(nl) => line_start += nl + 1,
                None => return false,
            }
        }
    }
}

/// Byte offset just past the last complete sentence in `text`, if any.
fn last_sentence_end(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut end = None;
    for (i, &b) in bytes.iter().enumerate() {
        let next_is_space = bytes.get(i + 1).is_some_and(|n| n.is_ascii_whitespace());
        if b == b'\n' || (matches!(b, b'.' | b'!' | b'?' | b':' | b';') && next_is_space) {
            end = Some(i + 1);
        }
    }
    end
}

/// Splits text that ends at a sentence boundary into its sentences.
fn split_sentences(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut parts = Vec::new();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let boundary = b == b'\n'
            || (matches!(b, b'.' | b'!' | b'?' | b':' | b';')
                && bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace()));
        if boundary {
            parts.push(&text[start..=i]);
            start = i + 1;
        }
    }
    if start < text.len() {
        parts.push(&text[start..]);
    }
    parts
}

fn push_sentences(out: &mut Vec<Segment>, text: &str) {
    for sentence in split_sentences(text) {
        let sentence = sentence.trim();
        if !sentence.is_empty() {
            out.push(Segment::Text(sentence.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pieces: &[&str]) -> (Vec<Segment>, Leftover) {
        let mut s = Segmenter::default();
        let mut out = Vec::new();
        for p in pieces {
            out.extend(s.push(p));
        }
        let (rest, leftover) = s.finish();
        out.extend(rest);
        (out, leftover)
    }

    fn text(s: &str) -> Segment {
        Segment::Text(s.into())
    }

    fn code(s: &str) -> Segment {
        Segment::Code(s.into())
    }

    #[test]
    fn sentences_are_released_as_they_complete() {
        let mut s = Segmenter::default();
        assert_eq!(s.push("Hello there. How"), vec![text("Hello there.")]);
        assert_eq!(s.push(" are you? Fine"), vec![text("How are you?")]);
        assert_eq!(s.finish(), (vec![text("Fine")], Leftover::None));
    }

    #[test]
    fn decimals_are_not_sentence_ends() {
        let (out, _) = run(&["It is 3.5 degrees. Cold."]);
        assert_eq!(out, vec![text("It is 3.5 degrees."), text("Cold.")]);
    }

    #[test]
    fn fence_split_in_every_place() {
        let reply = "Let me check.\n```rhai\nlet x = 1;\nprint(x);\n```\nDone.";
        let expected = vec![
            text("Let me check."),
            code("let x = 1;\nprint(x);"),
            text("Done."),
        ];
        for cut in 0..reply.len() {
            let (a, b) = reply.split_at(cut);
            assert_eq!(run(&[a, b]).0, expected, "cut at {cut}");
        }
        let chars: Vec<String> = reply.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(run(&pieces).0, expected);
    }

    #[test]
    fn code_is_released_when_the_fence_closes() {
        let mut s = Segmenter::default();
        assert_eq!(s.push("```rhai\n1 + 1\n`"), vec![]);
        assert_eq!(s.push("``"), vec![code("1 + 1")]);
    }

    #[test]
    fn backticks_inside_code_lines_do_not_close() {
        let (out, _) = run(&["```\nlet s = \"a```b\";\n```"]);
        assert_eq!(out, vec![code("let s = \"a```b\";")]);
    }

    #[test]
    fn unclosed_block_is_reported() {
        let (out, leftover) = run(&["Sure.\n```rhai\nprint(1);\n"]);
        assert_eq!(out, vec![text("Sure.")]);
        assert_eq!(leftover, Leftover::UnclosedCode("print(1);".into()));
    }

    #[test]
    fn two_blocks_with_text_between() {
        let (out, _) = run(&["A.\n```rhai\n1\n```\nB.\n```rhai\n2\n```\nC."]);
        assert_eq!(
            out,
            vec![text("A."), code("1"), text("B."), code("2"), text("C.")]
        );
    }
}
