//! Server-sent events as OpenAI-compatible servers actually send them.
//!
//! The servers people run at home differ in the details: llama.cpp, Ollama, vLLM and
//! TensorZero use `\n` or `\r\n`, some send `: keep-alive` comments, some an `event:`
//! line, some a final usage chunk with no choices, some an error object in the middle
//! of the stream. This parser takes bytes as they arrive, in any chunking, and yields
//! the `data` of each complete event.

/// One complete server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, empty when absent.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Incremental SSE parser: feed it bytes, take complete events.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    event: String,
    data: Vec<String>,
}

impl SseParser {
    /// Adds `bytes` and returns the events they completed, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8_lossy(&line);
            self.line(&line, &mut events);
        }
        events
    }

    /// Ends the stream: an event still missing its blank line is complete now.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        if !self.buffer.is_empty() {
            let rest = std::mem::take(&mut self.buffer);
            let line = String::from_utf8_lossy(&rest);
            self.line(line.trim_end_matches('\r'), &mut events);
        }
        self.dispatch(&mut events);
        events
    }

    fn line(&mut self, line: &str, events: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        if line.starts_with(':') {
            return; // a comment, e.g. a keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => self.data.push(value.to_string()),
            "event" => self.event = value.to_string(),
            _ => {} // id, retry: nothing to do for a single request
        }
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        if self.data.is_empty() {
            self.event.clear();
            return;
        }
        events.push(SseEvent {
            event: std::mem::take(&mut self.event),
            data: std::mem::take(&mut self.data).join("\n"),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&str]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        for chunk in chunks {
            events.extend(parser.push(chunk.as_bytes()));
        }
        events.extend(parser.finish());
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
}
