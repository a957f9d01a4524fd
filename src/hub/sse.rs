//! Server-sent events as OpenAI-compatible servers actually send them.
//!
//! The servers people run at home differ in the details: llama.cpp, Ollama, vLLM and
//! TensorZero use `\n` or `\r\n`, some send `: keep-alive` comments, some an `event:`
//! line, some a final usage chunk with no choices, some an error object in the middle
//! of the stream. This parser takes bytes as they arrive, in any chunking, and yields
//! the `data` of each complete event.
//!
//! The server is not trusted: each byte is scanned once (a reply in 1-byte chunks costs
//! what it costs in one chunk), and a line or an event longer than the configured limit
//! is an error rather than a buffer that grows with whatever the server sends.

/// One complete server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, empty when absent.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// The stream broke the parser's bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "an event of the stream passed {limit} bytes without ending (hub.max_event_bytes); raise it if the server really sends such events"
)]
pub struct EventTooLarge {
    /// The limit that was passed.
    pub limit: usize,
}

/// Incremental SSE parser: feed it bytes, take complete events.
///
/// Holds at most about `max_event_bytes` twice over (the unfinished line and the
/// unfinished event), whatever it is fed.
#[derive(Debug)]
pub struct SseParser {
    /// Bytes of the line not yet complete; never holds a `\n`.
    partial: Vec<u8>,
    event: String,
    data: String,
    has_data: bool,
    max_event_bytes: usize,
    /// Set once the bound was passed: the stream is not parsed any further.
    broken: bool,
}

impl SseParser {
    /// A parser refusing lines and events over `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        SseParser {
            partial: Vec::new(),
            event: String::new(),
            data: String::new(),
            has_data: false,
            max_event_bytes,
            broken: false,
        }
    }

    /// Adds `bytes` and returns the events they completed, in order. After an error
    /// every later call fails the same way.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, EventTooLarge> {
        self.check()?;
        let mut events = Vec::new();
        let mut rest = bytes;
        // Only the new bytes are searched: the unfinished line has no `\n`.
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(end);
            rest = &tail[1..];
            self.extend_line(head)?;
            let mut line = std::mem::take(&mut self.partial);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.line(&String::from_utf8_lossy(&line), &mut events)?;
            // Keep the allocation for the next line, unless one huge line grew it.
            line.clear();
            if line.capacity() <= 64 * 1024 {
                self.partial = line;
            }
        }
        self.extend_line(rest)?;
        Ok(events)
    }

    /// Ends the stream: an event still missing its blank line is complete now.
    pub fn finish(&mut self) -> Result<Vec<SseEvent>, EventTooLarge> {
        self.check()?;
        let mut events = Vec::new();
        if !self.partial.is_empty() {
            let rest = std::mem::take(&mut self.partial);
            let line = String::from_utf8_lossy(&rest);
            self.line(line.trim_end_matches('\r'), &mut events)?;
        }
        self.dispatch(&mut events);
        Ok(events)
    }

    fn check(&self) -> Result<(), EventTooLarge> {
        if self.broken {
            return Err(EventTooLarge {
                limit: self.max_event_bytes,
            });
        }
        Ok(())
    }

    fn fail(&mut self) -> EventTooLarge {
        self.broken = true;
        self.partial = Vec::new();
        self.data = String::new();
        self.event = String::new();
        EventTooLarge {
            limit: self.max_event_bytes,
        }
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), EventTooLarge> {
        if self.partial.len() + bytes.len() > self.max_event_bytes {
            return Err(self.fail());
        }
        self.partial.extend_from_slice(bytes);
        Ok(())
    }

    fn line(&mut self, line: &str, events: &mut Vec<SseEvent>) -> Result<(), EventTooLarge> {
        if line.is_empty() {
            self.dispatch(events);
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(()); // a comment, e.g. a keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                // Many short `data:` lines make one event too: it is bounded as a whole.
                if self.data.len() + value.len() + 1 > self.max_event_bytes {
                    return Err(self.fail());
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            _ => {} // id, retry: nothing to do for a single request
        }
        Ok(())
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        if !self.has_data {
            self.event.clear();
            return;
        }
        self.has_data = false;
        events.push(SseEvent {
            event: std::mem::take(&mut self.event),
            data: std::mem::take(&mut self.data),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&str]) -> Vec<SseEvent> {
        let mut parser = SseParser::new(1 << 20);
        let mut events = Vec::new();
        for chunk in chunks {
            events.extend(parser.push(chunk.as_bytes()).unwrap());
        }
        events.extend(parser.finish().unwrap());
        events
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn crlf_comments_and_split_chunks() {
        let events = all(&[
            ": keep-alive\r\n\r\nda",
            "ta: {\"a\":1}\r",
            "\n\r\ndata:[DONE]\n\n",
        ]);
        assert_eq!(data(&events), ["{\"a\":1}", "[DONE]"]);
    }

    #[test]
    fn multi_line_data_and_event_names() {
        let events = all(&["event: error\ndata: a\ndata: b\n\ndata: c\n\n"]);
        assert_eq!(events[0].event, "error");
        assert_eq!(events[0].data, "a\nb");
        assert_eq!(events[1].event, "");
    }

    #[test]
    fn last_event_without_blank_line_is_kept() {
        assert_eq!(data(&all(&["data: x\n\ndata: y"])), ["x", "y"]);
    }

    #[test]
    fn one_byte_chunks_parse_like_one_chunk() {
        let text = ": keep-alive\r\n\r\nevent: x\ndata: {\"a\":\"é\"}\r\ndata: 2\n\ndata: [DONE]\n\ndata: tail";
        let whole = all(&[text]);
        let mut parser = SseParser::new(1 << 20);
        let mut events = Vec::new();
        for byte in text.as_bytes() {
            events.extend(parser.push(std::slice::from_ref(byte)).unwrap());
        }
        events.extend(parser.finish().unwrap());
        assert_eq!(events, whole);
        assert_eq!(data(&whole), ["{\"a\":\"é\"}\n2", "[DONE]", "tail"]);
    }

    #[test]
    fn a_line_or_an_event_over_the_limit_is_an_error_that_sticks() {
        let mut parser = SseParser::new(100);
        assert_eq!(parser.push(&[b'x'; 60]).unwrap(), []);
        assert_eq!(
            parser.push(&[b'x'; 60]).unwrap_err(),
            EventTooLarge { limit: 100 }
        );
        assert!(parser.push(b"\n\ndata: ok\n\n").is_err());
        assert!(parser.finish().is_err());

        let mut parser = SseParser::new(100);
        let many = "data: 0123456789\n".repeat(20);
        assert!(parser.push(many.as_bytes()).is_err());

        let mut parser = SseParser::new(100);
        let within = "data: 0123456789\n\n".repeat(20);
        assert_eq!(parser.push(within.as_bytes()).unwrap().len(), 20);
    }
}
