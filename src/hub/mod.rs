//! The hub client: OpenAI-compatible Chat Completions, streamed (docs/architecture.md,
//! "The model exchange").
//!
//! One client serves an ordered list of endpoints: the hub first, then perhaps a small
//! model on the LAN or the device. A turn goes to the first healthy endpoint; one that
//! cannot be reached (or answers 5xx) is marked down for a while so the next turns do
//! not wait for it again, and the next endpoint is tried. Once a reply has started
//! streaming it is never retried elsewhere: the user has already heard part of it.
//!
//! The HTTP stack is reqwest with rustls on the `ring` provider (no `aws-lc-sys`,
//! which is painful to cross-compile) and the platform verifier (system roots), plus
//! an optional extra CA. reqwest rather than hyper directly because it brings
//! connection pooling, proxies-off defaults, TLS wiring and streamed bodies for a few
//! lines; all the tolerance for server quirks lives in [`sse`] and [`stream`].
//!
//! The API key is read once from a file or an environment variable and only ever
//! placed in the `Authorization` header; it is never logged or printed. It is not sent
//! in clear text off this machine: an endpoint with a key on plain `http` to a host
//! that is not loopback is refused unless `hub.allow_insecure` says otherwise, and
//! redirects are not followed (an API has no business moving a POST elsewhere).
//!
//! The server is not trusted with our memory either: the reply is held to
//! [`StreamLimits`] (see [`stream`]) and an error body is read only up to
//! `hub.max_error_body_bytes`.

pub mod sse;
pub mod stream;

pub use sse::EventTooLarge;
pub use stream::{Assembler, ChatStream, StreamLimits, ToolCall};

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the client needs, from `[hub]` (`config.hub.settings()`).
#[derive(Debug, Clone, PartialEq)]
pub struct HubSettings {
    /// The endpoints, tried in order.
    pub endpoints: Vec<EndpointSettings>,
    /// Time to establish a connection.
    pub connect_timeout: Duration,
    /// Time from sending the request to the first bytes of the reply.
    pub first_byte_timeout: Duration,
    /// Longest silence between two pieces of a streamed reply.
    pub chunk_timeout: Duration,
    /// How long an endpoint that failed is skipped.
    pub retry_after: Duration,
    /// What one reply may take.
    pub limits: StreamLimits,
    /// Most bytes of an error answer read.
    pub max_error_body_bytes: usize,
    /// Send an API key over plain `http` to another machine.
    pub allow_insecure: bool,
    /// `max_tokens` in each request.
    pub max_tokens: u32,
    /// Extra CA certificate(s), PEM.
    pub ca_file: Option<PathBuf>,
}

/// One model endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointSettings {
    /// Base URL, with or without `/v1` (or the full `/chat/completions` URL).
    pub url: String,
    /// The model name the server expects.
    pub model: String,
    /// File holding the API key (first line).
    pub api_key_file: Option<PathBuf>,
    /// Environment variable holding the API key, when there is no file.
    pub api_key_env: Option<String>,
}

impl EndpointSettings {
    /// Whether this endpoint sends an API key over plain `http` to a host other than
    /// this machine, where anyone on the way can read it.
    pub fn sends_key_in_clear(&self) -> bool {
        if self.api_key_file.is_none() && self.api_key_env.is_none() {
            return false;
        }
        let Ok(url) = reqwest::Url::parse(self.url.trim()) else {
            return false; // never sent anywhere: the request fails before connecting
        };
        url.scheme() == "http" && !is_loopback(&url)
    }

    /// Why this endpoint is refused, if it is: it would send its key in clear text off
    /// this machine and `allow_insecure` (`hub.allow_insecure`) is off.
    pub fn plain_http_refusal(&self, allow_insecure: bool) -> Option<String> {
        (!allow_insecure && self.sends_key_in_clear()).then(|| {
            format!(
                "hub endpoint {} would send its API key over plain http to another machine: use https:// (with hub.ca_file for a private CA), or set hub.allow_insecure = true to accept that anyone on the network can read the key",
                self.url.trim()
            )
        })
    }
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback(),
        Ok(std::net::IpAddr::V6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => host.trim_end_matches('.').eq_ignore_ascii_case("localhost"),
    }
}

/// Whether code comes as fenced text or as native tool calls (`hub.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CodeMode {
    /// ```` ```rhai ```` blocks in the text.
    Fenced,
    /// A `run_code` tool the server calls natively.
    Tools,
}

/// One message of a conversation, as Chat Completions takes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text; `None` only for an assistant message that is all tool calls.
    pub content: Option<String>,
    /// Tool calls the assistant made (tool-call mode).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `tool` messages: the call this answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message with `role` and text `content`.
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// The message's text, empty when it has none.
    pub fn text(&self) -> &str {
        self.content.as_deref().unwrap_or("")
    }
}

/// What went wrong talking to the hub. Each message says what to check.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The client could not be built (bad CA file, unreadable key file...).
    #[error("{0}")]
    Setup(String),
    /// No endpoint answered; one line per endpoint tried.
    #[error("no model endpoint answered: {}", .0.join("; "))]
    Unavailable(Vec<String>),
    /// The reply stopped arriving.
    #[error(
        "the model stopped sending for {0:?} in the middle of its reply; check the hub's load or raise hub.chunk_timeout_ms"
    )]
    Stalled(Duration),
    /// The connection broke in the middle of the reply.
    #[error("the reply was cut off: {0}; check the hub and the network")]
    Cut(String),
    /// The server sent something that is not a Chat Completions stream.
    #[error("the hub sent malformed data ({0}); is the endpoint URL an OpenAI-compatible API?")]
    Malformed(String),
    /// The reply went on past the configured size.
    #[error(
        "the model's reply passed {0} bytes without ending and was stopped (hub.max_reply_bytes)"
    )]
    TooLong(usize),
    /// One SSE line or event passed `hub.max_event_bytes`.
    #[error("the hub sent malformed data: {0}")]
    EventTooLarge(#[from] EventTooLarge),
    /// A tool call past `hub.max_tool_calls`.
    #[error(
        "the model's reply has a tool call with index {index}, past the limit of {limit} tool calls per reply (hub.max_tool_calls)"
    )]
    TooManyToolCalls {
        /// The index the server sent.
        index: u64,
        /// The configured limit.
        limit: usize,
    },
    /// The server reported an error in the middle of the stream.
    #[error("the hub reported an error: {0}")]
    Server(String),
}

/// A configured endpoint, ready to use.
struct Endpoint {
    url: String,
    model: String,
    api_key: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "********"))
            .finish()
    }
}

/// The OpenAI-compatible chat client over the configured endpoints.
#[derive(Debug)]
pub struct HubClient {
    http: reqwest::Client,
    endpoints: Vec<Endpoint>,
    /// Per endpoint: down until this instant.
    down_until: Mutex<Vec<Option<Instant>>>,
    first_byte_timeout: Duration,
    chunk_timeout: Duration,
    retry_after: Duration,
    limits: StreamLimits,
    max_error_body_bytes: usize,
    max_tokens: u32,
}

impl HubClient {
    /// A client for `settings`' endpoints. Reads API keys and the CA file now, so a
    /// missing file is reported at start, not in the middle of a conversation.
    pub fn new(settings: &HubSettings) -> Result<HubClient, HubError> {
        // reqwest is built without a default crypto provider; ring is ours. A second
        // install (another client in the same process) is not an error.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true);
        if let Some(ca) = &settings.ca_file {
            let pem = std::fs::read(ca).map_err(|e| {
                HubError::Setup(format!("cannot read hub.ca_file {}: {e}", ca.display()))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                HubError::Setup(format!(
                    "hub.ca_file {} is not a PEM certificate: {e}",
                    ca.display()
                ))
            })?;
            builder = builder.tls_certs_merge(certs);
        }
        let http = builder
            .build()
            .map_err(|e| HubError::Setup(format!("cannot set up HTTP(S): {e}")))?;
        for endpoint in &settings.endpoints {
            if let Some(refusal) = endpoint.plain_http_refusal(settings.allow_insecure) {
                return Err(HubError::Setup(refusal));
            }
            if endpoint.sends_key_in_clear() {
                tracing::warn!(
                    endpoint = %endpoint.url,
                    "the API key goes over plain http to another machine, readable on the way (hub.allow_insecure = true)"
                );
            }
        }
        let endpoints = settings
            .endpoints
            .iter()
            .map(endpoint)
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(HubError::Setup(
                "no model endpoint configured: add one to hub.endpoints".into(),
            ));
        }
        Ok(HubClient {
            http,
            down_until: Mutex::new(vec![None; endpoints.len()]),
            endpoints,
            first_byte_timeout: settings.first_byte_timeout,
            chunk_timeout: settings.chunk_timeout,
            retry_after: settings.retry_after,
            limits: settings.limits,
            max_error_body_bytes: settings.max_error_body_bytes,
            max_tokens: settings.max_tokens,
        })
    }

    /// The model named by the first endpoint (what `prompt` shows).
    pub fn primary_model(&self) -> &str {
        &self.endpoints[0].model
    }

    /// The JSON body of a streamed request for `model`.
    pub fn request_body(
        &self,
        model: &str,
        messages: &[ChatMessage],
        tools: Option<&Value>,
    ) -> Value {
        let mut body = serde_json::json!({
            "model": model,
            "messages": messages,
            "stream": true,
            "max_tokens": self.max_tokens,
        });
        if let Some(tools) = tools {
            body["tools"] = tools.clone();
        }
        body
    }

    /// Starts a streamed reply from the first endpoint that answers. Endpoints marked
    /// down are skipped until their retry time, unless every endpoint is down.
    pub async fn stream(
        &self,
        messages: &[ChatMessage],
        tools: Option<&Value>,
    ) -> Result<ChatStream, HubError> {
        let order = self.order();
        let mut failures = Vec::new();
        for index in order {
            let endpoint = &self.endpoints[index];
            let body = self.request_body(&endpoint.model, messages, tools);
            let started = Instant::now();
            match self.open(endpoint, &body).await {
                Ok(stream) => {
                    self.set_down(index, None);
                    tracing::debug!(
                        endpoint = %endpoint.url,
                        first_byte_ms = started.elapsed().as_millis() as u64,
                        "reply started"
                    );
                    return Ok(stream.with_endpoint(index, endpoint.url.clone()));
                }
                Err(message) => {
                    tracing::warn!(endpoint = %endpoint.url, "{message}");
                    self.set_down(index, Some(Instant::now() + self.retry_after));
                    failures.push(format!("{}: {message}", endpoint.url));
                }
            }
        }
        Err(HubError::Unavailable(failures))
    }

    /// Endpoint indices to try, in order: healthy ones first (configured order), then
    /// the ones marked down, so that a turn is never refused without trying.
    fn order(&self) -> Vec<usize> {
        let now = Instant::now();
        let down = self
            .down_until
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default();
        let is_down = |i: usize| down.get(i).copied().flatten().is_some_and(|t| t > now);
        let (up, down): (Vec<usize>, Vec<usize>) =
            (0..self.endpoints.len()).partition(|&i| !is_down(i));
        up.into_iter().chain(down).collect()
    }

    fn set_down(&self, index: usize, until: Option<Instant>) {
        if let Ok(mut down) = self.down_until.lock()
            && let Some(slot) = down.get_mut(index)
        {
            *slot = until;
        }
    }

    /// Sends the request and waits for the headers and the first body bytes.
    async fn open(&self, endpoint: &Endpoint, body: &Value) -> Result<ChatStream, String> {
        let mut request = self.http.post(&endpoint.url).json(body);
        if let Some(key) = &endpoint.api_key {
            request = request.bearer_auth(key);
        }
        let attempt = async {
            let response = request.send().await.map_err(describe_send_error)?;
            let status = response.status();
            if !status.is_success() {
                let body = read_capped(response, self.max_error_body_bytes).await;
                return Err(describe_status(status, &String::from_utf8_lossy(&body)));
            }
            let event_stream = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_none_or(|v| !v.contains("application/json"));
            let mut stream =
                ChatStream::new(response, event_stream, self.chunk_timeout, self.limits);
            stream.prime().await.map_err(|e| e.to_string())?;
            Ok(stream)
        };
        match tokio::time::timeout(self.first_byte_timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(format!(
                "no answer within {} ms; is the model loaded? (hub.first_byte_timeout_ms)",
                self.first_byte_timeout.as_millis()
            )),
        }
    }
}

/// At most `cap` bytes of an error body: a server may send an endless one, and its
/// start is all the message shows. The rest is never read; dropping the response
/// closes the connection.
async fn read_capped(mut response: reqwest::Response, cap: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < cap {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = cap - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    body
}

/// Reads an endpoint's key and normalises its URL.
fn endpoint(settings: &EndpointSettings) -> Result<Endpoint, HubError> {
    let api_key = match (&settings.api_key_file, &settings.api_key_env) {
        (Some(path), _) => Some(read_key_file(path)?),
        (None, Some(var)) => Some(std::env::var(var).map_err(|_| {
            HubError::Setup(format!(
                "hub endpoint {}: environment variable {var} (api_key_env) is not set",
                settings.url
            ))
        })?),
        (None, None) => None,
    };
    Ok(Endpoint {
        url: completions_url(&settings.url),
        model: settings.model.clone(),
        api_key: api_key.filter(|k| !k.is_empty()),
    })
}

fn read_key_file(path: &PathBuf) -> Result<String, HubError> {
    std::fs::read_to_string(path)
        .map(|k| k.trim().to_string())
        .map_err(|e| {
            HubError::Setup(format!(
                "cannot read the API key file {}: {e}",
                path.display()
            ))
        })
}

/// The chat completions URL for a base URL given with or without `/v1` (or in full).
pub fn completions_url(base: &str) -> String {
    let base = base.trim().trim_end_matches('/');
    if base.ends_with("/chat/completions") {
        base.to_string()
    } else if base.ends_with("/v1") {
        format!("{base}/chat/completions")
    } else {
        format!("{base}/v1/chat/completions")
    }
}

fn describe_send_error(error: reqwest::Error) -> String {
    if error.is_connect() {
        let cause = std::error::Error::source(&error)
            .map(|s| s.to_string())
            .unwrap_or_default();
        format!("cannot connect ({cause}); is the server running and the URL right?")
    } else if error.is_timeout() {
        "connection timed out (hub.connect_timeout_ms)".into()
    } else {
        format!("request failed: {error}")
    }
}

fn describe_status(status: reqwest::StatusCode, body: &str) -> String {
    let detail = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| stream::error_message(&v))
        .unwrap_or_else(|| body.chars().take(200).collect());
    let detail: String = detail.chars().take(stream::ERROR_CHARS).collect();
    let hint = match status.as_u16() {
        401 | 403 => "check the API key (api_key_file / api_key_env)",
        404 => "check the endpoint URL and the model name",
        400 | 422 => "the server rejected the request; check the model name",
        429 => "the server is busy",
        _ if status.is_server_error() => "the server failed; check its log",
        _ => "unexpected answer",
    };
    format!("HTTP {status}: {detail} ({hint})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_with_or_without_v1() {
        assert_eq!(
            completions_url("http://h:8080"),
            "http://h:8080/v1/chat/completions"
        );
        assert_eq!(
            completions_url("http://h:8080/v1/"),
            "http://h:8080/v1/chat/completions"
        );
        assert_eq!(
            completions_url("http://h/openai/v1/chat/completions"),
            "http://h/openai/v1/chat/completions"
        );
    }

    #[test]
    fn key_never_in_debug_output() {
        let e = Endpoint {
            url: "u".into(),
            model: "m".into(),
            api_key: Some("sk-secret".into()),
        };
        assert!(!format!("{e:?}").contains("sk-secret"));
    }
}
