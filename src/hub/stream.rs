//! One streamed reply: text pieces as they arrive, tool calls assembled from deltas.
//!
//! Tolerates what real servers do: a role-only first delta, usage chunks with no
//! choices, `finish_reason` in its own chunk or next to the last text, `data: [DONE]`
//! or just the end of the body, an error object in the middle of the stream, tool-call
//! arguments in pieces (vLLM) or whole (Ollama), and a plain JSON body when the server
//! ignored `stream: true`.

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

/// A reply being received.
pub struct ChatStream {
    response: reqwest::Response,
    parser: SseParser,
    event_stream: bool,
    json_body: Vec<u8>,
    pending: VecDeque<String>,
    calls: Vec<ToolCall>,
    done: bool,
    chunk_timeout: Duration,
    max_reply_bytes: usize,
    received: usize,
    text_bytes: usize,
    endpoint: usize,
    endpoint_url: String,
    finish_reason: Option<String>,
}

impl ChatStream {
    /// Wraps a successful response; `event_stream` is false for a plain JSON body.
    pub(super) fn new(
        response: reqwest::Response,
        event_stream: bool,
        chunk_timeout: Duration,
        max_reply_bytes: usize,
    ) -> Self {
        ChatStream {
            response,
            parser: SseParser::default(),
            event_stream,
            json_body: Vec::new(),
            pending: VecDeque::new(),
            calls: Vec::new(),
            done: false,
            chunk_timeout,
            max_reply_bytes,
            received: 0,
            text_bytes: 0,
            endpoint: 0,
            endpoint_url: String::new(),
            finish_reason: None,
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
        self.finish_reason.as_deref()
    }

    /// Waits for the first bytes of the body (the caller bounds this wait).
    pub(super) async fn prime(&mut self) -> Result<(), HubError> {
        let chunk = self.response.chunk().await;
        self.take(chunk)
    }

    /// The next piece of text, `None` at the end of the reply.
    pub async fn next(&mut self) -> Result<Option<String>, HubError> {
        loop {
            if let Some(piece) = self.pending.pop_front() {
                return Ok(Some(piece));
            }
            if self.done {
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
        &self.calls
    }

    fn take(&mut self, chunk: reqwest::Result<Option<impl AsRef<[u8]>>>) -> Result<(), HubError> {
        let chunk = chunk.map_err(|e| HubError::Cut(error_chain(&e)))?;
        let Some(bytes) = chunk else {
            self.done = true;
            if self.event_stream {
                for event in self.parser.finish() {
                    self.event(&event.event, &event.data)?;
                }
            } else {
                self.whole_body()?;
            }
            return Ok(());
        };
        let bytes = bytes.as_ref();
        self.received += bytes.len();
        if self.received > framing_limit(self.max_reply_bytes) {
            // Framing, not text, can also grow without end (e.g. endless keep-alives).
            return Err(HubError::TooLong(self.max_reply_bytes));
        }
        if !self.event_stream {
            self.json_body.extend_from_slice(bytes);
            return Ok(());
        }
        for event in self.parser.push(bytes) {
            if self.done {
                break;
            }
            self.event(&event.event, &event.data)?;
        }
        Ok(())
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
                self.text_bytes += text.len();
                if self.text_bytes > self.max_reply_bytes {
                    return Err(HubError::TooLong(self.max_reply_bytes));
                }
                self.pending.push_back(text.to_string());
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (position, call) in calls.iter().enumerate() {
                    self.tool_delta(position, call);
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
        }
        Ok(())
    }

    fn tool_delta(&mut self, position: usize, call: &Value) {
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .map_or(position, |i| i as usize);
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
        let slot = &mut self.calls[index];
        if let Some(id) = call.get("id").and_then(Value::as_str)
            && !id.is_empty()
        {
            slot.id = id.to_string();
        }
        let Some(function) = call.get("function") else {
            return;
        };
        if let Some(name) = function.get("name").and_then(Value::as_str)
            && slot.function.name != name
        {
            slot.function.name.push_str(name);
        }
        match function.get("arguments") {
            Some(Value::String(piece)) => slot.function.arguments.push_str(piece),
            Some(Value::Null) | None => {}
            // Some servers send the arguments as an object rather than as text.
            Some(object) => slot.function.arguments = object.to_string(),
        }
    }
}

/// The message of an OpenAI-style error object (`{"error": {"message": ...}}`,
/// `{"error": "..."}`), if `value` is one.
pub fn error_message(value: &Value) -> Option<String> {
    let error = value.get("error")?;
    if error.is_null() {
        return None;
    }
    Some(
        error
            .get("message")
            .and_then(Value::as_str)
            .or_else(|| error.as_str())
            .map_or_else(|| error.to_string(), str::to_string),
    )
}

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
