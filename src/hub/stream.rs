//! One streamed reply: text pieces as they arrive, tool calls assembled from deltas.
//!
//! Tolerates what real servers do: a role-only first delta, usage chunks with no
//! choices, `finish_reason` in its own chunk or next to the last text, `data: [DONE]`
//! or just the end of the body, an error object in the middle of the stream, tool-call
//! arguments in pieces (vLLM) or whole (Ollama), and a plain JSON body when the server
//! ignored `stream: true`.
//!
//! The assembly is an [`Assembler`]: synchronous, bytes in, text pieces and tool calls
//! out, so it can be driven (and fuzzed) without a network. Nothing the server sends
//! makes it hold more than its [`StreamLimits`] allow: reply text, tool-call ids, names
//! and arguments together stay under `max_reply_bytes`, a reply has at most
//! `max_tool_calls` calls (an index past that is an error, never a vector grown up to
//! it), one SSE event stays under `max_event_bytes`, and the bytes on the wire under a
//! generous multiple of `max_reply_bytes`.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::HubError;
use super::sse::SseParser;

/// A native tool call, as the assistant message carries it back to the server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    /// The server's id for the call (made up when the server gave none).
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// What is called.
    pub function: FunctionCall,
}

/// The function part of a [`ToolCall`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments: a JSON object, as text.
    pub arguments: String,
}

/// Most bytes on the wire, framing included, accepted for a reply whose text may
/// reach `max_reply_bytes`. Real servers wrap every token in a few hundred bytes of
/// JSON (llama.cpp adds timings to each chunk: ~300 bytes for a 4-byte token), so
/// the bound is generous; it only stops streams that grow without carrying text.
fn framing_limit(max_reply_bytes: usize) -> usize {
    max_reply_bytes.saturating_mul(128).max(4 << 20)
}

/// What one reply may take, from `[hub]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Reply text plus tool-call ids, names and arguments (`hub.max_reply_bytes`).
    pub max_reply_bytes: usize,
    /// One SSE line or event (`hub.max_event_bytes`).
    pub max_event_bytes: usize,
    /// Tool calls in one reply (`hub.max_tool_calls`).
    pub max_tool_calls: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            max_reply_bytes: 32 * 1024,
            max_event_bytes: 1 << 20,
            max_tool_calls: 16,
        }
    }
}

/// Assembles one reply from the bytes of its body: synchronous, no I/O.
///
/// Feed the body with [`feed`](Self::feed) as it arrives, take text with
/// [`next_piece`](Self::next_piece), call [`finish`](Self::finish) at the end of the
/// body; then [`tool_calls`](Self::tool_calls) is complete. After an error the reply
/// is over: the caller stops feeding.
#[derive(Debug)]
pub struct Assembler {
    parser: SseParser,
    event_stream: bool,
    json_body: Vec<u8>,
    pending: VecDeque<String>,
    calls: Vec<ToolCall>,
    done: bool,
    limits: StreamLimits,
    received: usize,
    reply_bytes: usize,
    finish_reason: Option<String>,
}

impl Assembler {
    /// An assembler for an SSE body (`event_stream`) or a plain JSON one.
    pub fn new(limits: StreamLimits, event_stream: bool) -> Self {
        Assembler {
            parser: SseParser::new(limits.max_event_bytes),
            event_stream,
            json_body: Vec::new(),
            pending: VecDeque::new(),
            calls: Vec::new(),
            done: false,
            limits,
            received: 0,
            reply_bytes: 0,
            finish_reason: None,
        }
    }

    /// Takes the next bytes of the body.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), HubError> {
        if self.done {
            return Ok(()); // after `[DONE]`: whatever follows is not part of the reply
        }
        self.received = self.received.saturating_add(bytes.len());
        if self.received > framing_limit(self.limits.max_reply_bytes) {
            // Framing, not text, can also grow without end (e.g. endless keep-alives).
            return Err(HubError::TooLong(self.limits.max_reply_bytes));
        }
        if !self.event_stream {
            self.json_body.extend_from_slice(bytes);
            return Ok(());
        }
        for event in self.parser.push(bytes)? {
            if self.done {
                break;
            }
            self.event(&event.event, &event.data)?;
        }
        Ok(())
    }

    /// The body ended: completes the last event (or parses the JSON body).
    pub fn finish(&mut self) -> Result<(), HubError> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        if self.event_stream {
            for event in self.parser.finish()? {
                self.event(&event.event, &event.data)?;
            }
            Ok(())
        } else {
            self.whole_body()
        }
    }

    /// The next piece of text received, if any.
    pub fn next_piece(&mut self) -> Option<String> {
        self.pending.pop_front()
    }

    /// Whether the reply is complete (`[DONE]` or the end of the body).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The tool calls assembled so far; complete once [`is_done`](Self::is_done).
    pub fn tool_calls(&self) -> &[ToolCall] {
        &self.calls
    }

    /// Why the server says the reply ended (`stop`, `length`, `tool_calls`...).
    pub fn finish_reason(&self) -> Option<&str> {
        self.finish_reason.as_deref()
    }

    fn event(&mut self, name: &str, data: &str) -> Result<(), HubError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let value: Value = serde_json::from_str(data).map_err(|e| {
            HubError::Malformed(format!(
                "invalid JSON in the stream: {e}: {}",
                data.chars().take(80).collect::<String>()
            ))
        })?;
        if let Some(message) = error_message(&value) {
            return Err(HubError::Server(message));
        }
        if name == "error" {
            return Err(HubError::Server(data.chars().take(200).collect()));
        }
        self.choices(&value, "delta")
    }

    fn whole_body(&mut self) -> Result<(), HubError> {
        let value: Value = serde_json::from_slice(&self.json_body).map_err(|e| {
            HubError::Malformed(format!("the reply is neither SSE nor valid JSON: {e}"))
        })?;
        self.json_body = Vec::new();
        if let Some(message) = error_message(&value) {
            return Err(HubError::Server(message));
        }
        self.choices(&value, "message")
    }

    fn choices(&mut self, value: &Value, key: &str) -> Result<(), HubError> {
        let Some(choices) = value.get("choices").and_then(Value::as_array) else {
            if value.get("usage").is_some() || value.get("object").is_some() {
                return Ok(()); // a usage or bookkeeping chunk
            }
            return Err(HubError::Malformed(
                "a chunk without `choices`: not a Chat Completions stream".into(),
            ));
        };
        // Only the first choice: we never ask for more than one.
        let Some(choice) = choices
            .iter()
            .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        else {
            return Ok(());
        };
        let delta = choice.get(key).or_else(|| choice.get("delta"));
        if let Some(delta) = delta {
            if let Some(text) = delta.get("content").and_then(Value::as_str)
                && !text.is_empty()
            {
                self.count(text.len())?;
                // The reply reaches a terminal (`ask`, `chat`), the logs and the speaker.
                self.pending.push_back(crate::text::clean_text(text));
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (position, call) in calls.iter().enumerate() {
                    self.tool_delta(position, call)?;
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.chars().take(64).collect());
        }
        Ok(())
    }

    /// Counts `bytes` more of the reply against `max_reply_bytes`.
    fn count(&mut self, bytes: usize) -> Result<(), HubError> {
        self.reply_bytes = self.reply_bytes.saturating_add(bytes);
        if self.reply_bytes > self.limits.max_reply_bytes {
            return Err(HubError::TooLong(self.limits.max_reply_bytes));
        }
        Ok(())
    }

    fn tool_delta(&mut self, position: usize, call: &Value) -> Result<(), HubError> {
        // Some servers leave the index out (or send something else): the position then.
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(position as u64);
        let limit = self.limits.max_tool_calls;
        let index = match usize::try_from(index) {
            Ok(i) if i < limit => i,
            _ => return Err(HubError::TooManyToolCalls { index, limit }),
        };
        while self.calls.len() <= index {
            let n = self.calls.len();
            self.calls.push(ToolCall {
                id: format!("call_{n}"),
                kind: "function".into(),
                function: FunctionCall {
                    name: String::new(),
                    arguments: String::new(),
                },
            });
        }
        if let Some(id) = call.get("id").and_then(Value::as_str)
            && !id.is_empty()
        {
            self.count(id.len())?;
            self.calls[index].id = id.to_string();
        }
        let Some(function) = call.get("function") else {
            return Ok(());
        };
        if let Some(name) = function.get("name").and_then(Value::as_str)
            && self.calls[index].function.name != name
        {
            self.count(name.len())?;
            self.calls[index].function.name.push_str(name);
        }
        match function.get("arguments") {
            Some(Value::String(piece)) => {
                self.count(piece.len())?;
                self.calls[index].function.arguments.push_str(piece);
            }
            Some(Value::Null) | None => {}
            // Some servers send the arguments as an object rather than as text.
            Some(object) => {
                let text = object.to_string();
                self.count(text.len())?;
                self.calls[index].function.arguments = text;
            }
        }
        Ok(())
    }
}

/// A reply being received.
pub struct ChatStream {
    response: reqwest::Response,
    assembler: Assembler,
    chunk_timeout: Duration,
    endpoint: usize,
    endpoint_url: String,
}

impl ChatStream {
    /// Wraps a successful response; `event_stream` is false for a plain JSON body.
    pub(super) fn new(
        response: reqwest::Response,
        event_stream: bool,
        chunk_timeout: Duration,
        limits: StreamLimits,
    ) -> Self {
        ChatStream {
            response,
            assembler: Assembler::new(limits, event_stream),
            chunk_timeout,
            endpoint: 0,
            endpoint_url: String::new(),
        }
    }

    pub(super) fn with_endpoint(mut self, index: usize, url: String) -> Self {
        self.endpoint = index;
        self.endpoint_url = url;
        self
    }

    /// Which endpoint answered: 0 is the first configured, more means a fallback.
    pub fn endpoint(&self) -> usize {
        self.endpoint
    }

    /// The URL of the endpoint that answered.
    pub fn endpoint_url(&self) -> &str {
        &self.endpoint_url
    }

    /// Why the server says the reply ended (`stop`, `length`, `tool_calls`...).
    pub fn finish_reason(&self) -> Option<&str> {
        self.assembler.finish_reason()
    }

    /// Waits for the first bytes of the body (the caller bounds this wait).
    pub(super) async fn prime(&mut self) -> Result<(), HubError> {
        let chunk = self.response.chunk().await;
        self.take(chunk)
    }

    /// The next piece of text, `None` at the end of the reply.
    pub async fn next(&mut self) -> Result<Option<String>, HubError> {
        loop {
            if let Some(piece) = self.assembler.next_piece() {
                return Ok(Some(piece));
            }
            if self.assembler.is_done() {
                return Ok(None);
            }
            let chunk = tokio::time::timeout(self.chunk_timeout, self.response.chunk())
                .await
                .map_err(|_| HubError::Stalled(self.chunk_timeout))?;
            self.take(chunk)?;
        }
    }

    /// The tool calls of the reply, complete once [`next`](Self::next) returned `None`.
    pub fn tool_calls(&self) -> &[ToolCall] {
        self.assembler.tool_calls()
    }

    fn take(&mut self, chunk: reqwest::Result<Option<impl AsRef<[u8]>>>) -> Result<(), HubError> {
        match chunk.map_err(|e| HubError::Cut(error_chain(&e)))? {
            Some(bytes) => self.assembler.feed(bytes.as_ref()),
            None => self.assembler.finish(),
        }
    }
}

/// The message of an OpenAI-style error object (`{"error": {"message": ...}}`,
/// `{"error": "..."}`), if `value` is one; cut to a few hundred characters, enough
/// to say what went wrong without a server filling the screen (or the log).
pub fn error_message(value: &Value) -> Option<String> {
    let error = value.get("error")?;
    if error.is_null() {
        return None;
    }
    let text = match error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
    {
        Some(text) => text.chars().take(ERROR_CHARS).collect(),
        None => error.to_string().chars().take(ERROR_CHARS).collect(),
    };
    Some(text)
}

/// Characters of a server's error message shown.
pub(super) const ERROR_CHARS: usize = 300;

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> StreamLimits {
        StreamLimits {
            max_reply_bytes: 100,
            max_event_bytes: 1000,
            max_tool_calls: 4,
        }
    }

    fn event(delta: Value) -> String {
        format!(
            "data: {}\n\n",
            serde_json::json!({"choices": [{"index": 0, "delta": delta}]})
        )
    }

    #[test]
    fn text_and_tool_calls_from_bytes() {
        let mut a = Assembler::new(limits(), true);
        let body = [
            event(serde_json::json!({"content": "Hi. "})),
            event(serde_json::json!({"tool_calls": [{"index": 1, "id": "b",
                "function": {"name": "run_code", "arguments": {"code": "1"}}}]})),
            "data: [DONE]\n\ndata: ignored\n\n".into(),
        ]
        .concat();
        a.feed(body.as_bytes()).unwrap();
        a.finish().unwrap();
        assert!(a.is_done());
        assert_eq!(a.next_piece().as_deref(), Some("Hi. "));
        assert_eq!(a.next_piece(), None);
        let calls = a.tool_calls();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].id, "call_0");
        assert_eq!(calls[1].function.arguments, "{\"code\":\"1\"}");
    }

    #[test]
    fn ids_names_and_arguments_count_against_the_reply_limit() {
        for call in [
            serde_json::json!({"index": 0, "id": "i".repeat(101)}),
            serde_json::json!({"index": 0, "function": {"name": "n".repeat(101)}}),
            serde_json::json!({"index": 0, "function": {"arguments": "a".repeat(101)}}),
            serde_json::json!({"index": 0, "function": {"arguments": {"a": "b".repeat(101)}}}),
        ] {
            let mut a = Assembler::new(limits(), true);
            let body = event(serde_json::json!({"tool_calls": [call]}));
            assert!(
                matches!(a.feed(body.as_bytes()), Err(HubError::TooLong(100))),
                "{body}"
            );
        }
    }

    #[test]
    fn calls_past_the_limit_are_refused_by_index_or_by_position() {
        let mut a = Assembler::new(limits(), true);
        let body = event(serde_json::json!({"tool_calls": [{"index": 4}]}));
        assert!(matches!(
            a.feed(body.as_bytes()),
            Err(HubError::TooManyToolCalls { index: 4, limit: 4 })
        ));
        let mut a = Assembler::new(limits(), true);
        let five = vec![serde_json::json!({"function": {"name": "f"}}); 5];
        let body = event(serde_json::json!({ "tool_calls": five }));
        assert!(matches!(
            a.feed(body.as_bytes()),
            Err(HubError::TooManyToolCalls { index: 4, limit: 4 })
        ));
        assert!(a.tool_calls().len() <= 4);
    }

    #[test]
    fn a_plain_json_body_is_bounded_by_the_framing_limit() {
        let mut a = Assembler::new(limits(), false);
        let chunk = vec![b' '; 1 << 20];
        let mut result = Ok(());
        for _ in 0..5 {
            result = a.feed(&chunk);
            if result.is_err() {
                break;
            }
        }
        assert!(matches!(result, Err(HubError::TooLong(100))));
    }
}
