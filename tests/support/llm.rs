//! A scripted OpenAI-compatible server: a real HTTP/1.1 server on 127.0.0.1 that
//! replays scripted replies, one per request, chunked as the script says, and can
//! misbehave the ways real servers and networks do. It records every request body,
//! so tests can check exactly what was sent to the model.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200, `text/event-stream`, each string written as its own HTTP chunk, then a
    /// clean end of body.
    Chunks(Vec<String>),
    /// 200 with a plain JSON body (a server that ignores `stream: true`).
    Json(Value),
    /// This status with this body.
    Status(u16, String),
    /// Reads the request and never answers.
    StallBeforeHeaders,
    /// Sends these chunks, then nothing, keeping the connection open.
    StallAfter(Vec<String>),
    /// Sends these chunks, then closes the connection in the middle of the body.
    CutAfter(Vec<String>),
    /// Sends this chunk again and again until the client goes away.
    Forever(String),
    /// This status, then a chunked body repeating this chunk until the client goes away.
    StatusForever(u16, String),
}

/// The running server.
pub struct ScriptedServer {
    /// Base URL, e.g. `http://127.0.0.1:40123/v1`.
    pub url: String,
    requests: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptedServer {
    /// Starts a server that answers requests with `replies`, in order. Once the
    /// script is used up it answers 500.
    pub async fn start(replies: Vec<Reply>) -> ScriptedServer {
        Self::spawn(replies, false).await
    }

    /// Starts a server that plays `replies` round and round and records nothing
    /// (for benchmarks).
    pub async fn cycling(replies: Vec<Reply>) -> ScriptedServer {
        Self::spawn(replies, true).await
    }

    async fn spawn(replies: Vec<Reply>, cycle: bool) -> ScriptedServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::from(replies)));
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let recorded = recorded.clone();
                let script = script.clone();
                tokio::spawn(async move {
                    let mut socket = socket;
                    while serve(&mut socket, recorded.clone(), script.clone(), cycle).await {}
                });
            }
        });
        ScriptedServer {
            url,
            requests,
            task,
        }
    }

    /// The JSON bodies of the requests received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A URL on which nothing listens (connection refused).
pub async fn refusing_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    url
}

async fn serve(
    socket: &mut TcpStream,
    recorded: Arc<Mutex<Vec<Value>>>,
    script: Arc<Mutex<VecDeque<Reply>>>,
    cycle: bool,
) -> bool {
    let Some(body) = read_request(socket).await else {
        return false;
    };
    let reply = {
        let mut script = script.lock().unwrap();
        let reply = script.pop_front();
        if cycle && let Some(reply) = &reply {
            script.push_back(reply.clone());
        }
        reply
    };
    if !cycle {
        recorded
            .lock()
            .unwrap()
            .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
    }
    let reply =
        reply.unwrap_or_else(|| Reply::Status(500, "{\"error\":\"script exhausted\"}".into()));
    let _ = socket.set_nodelay(true);
    match reply {
        Reply::Chunks(chunks) => {
            // Benchmarks keep the connection, as real servers do; tests see one
            // connection per request.
            if stream_head(socket, cycle).await.is_err() {
                return false;
            }
            for chunk in chunks {
                if write_chunk(socket, &chunk, !cycle).await.is_err() {
                    return false;
                }
            }
            return socket.write_all(b"0\r\n\r\n").await.is_ok() && cycle;
        }
        Reply::Json(value) => {
            let body = value.to_string();
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(body.as_bytes()).await;
        }
        Reply::Status(status, body) => {
            let head = format!(
                "HTTP/1.1 {status} Scripted\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(body.as_bytes()).await;
        }
        Reply::StallBeforeHeaders => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Reply::StallAfter(chunks) => {
            if stream_head(socket, false).await.is_err() {
                return false;
            }
            for chunk in chunks {
                if write_chunk(socket, &chunk, !cycle).await.is_err() {
                    return false;
                }
            }
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Reply::CutAfter(chunks) => {
            if stream_head(socket, false).await.is_err() {
                return false;
            }
            for chunk in chunks {
                if write_chunk(socket, &chunk, !cycle).await.is_err() {
                    return false;
                }
            }
            // A chunk that announces more bytes than ever come, then the close.
            let _ = socket.write_all(b"400\r\ndata: {\"cho").await;
            let _ = socket.shutdown().await;
        }
        Reply::StatusForever(status, chunk) => {
            let head = format!(
                "HTTP/1.1 {status} Scripted\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            );
            if socket.write_all(head.as_bytes()).await.is_err() {
                return false;
            }
            while write_chunk(socket, &chunk, false).await.is_ok() {}
        }
        Reply::Forever(chunk) => {
            if stream_head(socket, false).await.is_err() {
                return false;
            }
            while write_chunk(socket, &chunk, !cycle).await.is_ok() {}
        }
    }
    false
}

async fn read_request(socket: &mut TcpStream) -> Option<Vec<u8>> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let header_end = loop {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&data[..header_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while data.len() < header_end + length {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    }
    Some(data[header_end..header_end + length].to_vec())
}

async fn stream_head(socket: &mut TcpStream, keep_alive: bool) -> std::io::Result<()> {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    socket
        .write_all(
            format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: {connection}\r\n\r\n").as_bytes(),
        )
        .await
}

async fn write_chunk(socket: &mut TcpStream, data: &str, paced: bool) -> std::io::Result<()> {
    socket
        .write_all(format!("{:x}\r\n{data}\r\n", data.len()).as_bytes())
        .await?;
    socket.flush().await?;
    if paced {
        // Let each chunk travel on its own, as a model's tokens do.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// One SSE event carrying `delta` in the first choice.
pub fn delta_event(delta: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    )
}

/// A whole streamed reply in the style of llama.cpp / vLLM: a role-only first delta,
/// one delta per piece, a finish chunk, a usage chunk with no choices, `[DONE]`.
pub fn text_reply(pieces: &[&str]) -> Vec<String> {
    let mut chunks = vec![delta_event(json!({"role": "assistant"}))];
    for piece in pieces {
        chunks.push(delta_event(json!({"content": piece})));
    }
    chunks.push(format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    ));
    chunks.push(format!(
        "data: {}\n\n",
        json!({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
    ));
    chunks.push("data: [DONE]\n\n".into());
    chunks
}

/// [`text_reply`] of the text cut into pieces of `size` bytes (on char boundaries).
pub fn text_reply_in_pieces(text: &str, size: usize) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        current.push(c);
        if current.len() >= size {
            pieces.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    text_reply(&refs)
}

/// A tool-call reply as vLLM streams it: id and name first, arguments in pieces.
pub fn tool_call_reply(id: &str, code: &str, pieces: usize) -> Vec<String> {
    let arguments = json!({"code": code}).to_string();
    let size = arguments.len().div_ceil(pieces.max(1));
    let mut chunks = vec![delta_event(json!({"role": "assistant", "content": null}))];
    chunks.push(delta_event(
        json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
        "function": {"name": "run_code", "arguments": ""}}]}),
    ));
    let chars: Vec<char> = arguments.chars().collect();
    for part in chars.chunks(size) {
        let part: String = part.iter().collect();
        chunks.push(delta_event(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}),
        ));
    }
    chunks.push(format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    ));
    chunks.push("data: [DONE]\n\n".into());
    chunks
}
