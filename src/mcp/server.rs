//! One MCP server kept running: connected, its tools listed, restarted when it dies.
//!
//! A supervisor task per server owns the connection. It starts the server (a child
//! process in its own process group, or a Streamable HTTP session), waits at most
//! `mcp.start_timeout_ms` for `initialize` and the tool list, publishes the server's
//! class, re-lists the tools when the server says they changed, and when the
//! connection ends withdraws the class, waits (1 s, doubling to a minute; reset once a
//! connection lived a minute) and starts again. Calls meanwhile fail with what went
//! wrong and when the next try is.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, Implementation, InitializeRequestParams,
    PaginatedRequestParams, Tool,
};
use rmcp::service::{NotificationContext, Peer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::file::{ServerSpec, Transport};
use super::tools::{self, TextLimits, ToolCall};
use crate::skills::ClassDoc;
use crate::text::clean_line;

/// First wait before a restart; doubled after each failure up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between restarts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A connection that lived this long resets the backoff.
const STABLE: Duration = Duration::from_secs(60);
/// Environment variables a stdio server inherits (the MCP SDKs' own default set);
/// everything else it gets is its `env`.
pub const INHERITED_ENV: [&str; 6] = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];
/// Longest line of a server's standard error copied into our log.
const STDERR_LINE_BYTES: usize = 500;
/// Lines of a server's standard error logged per minute; the rest are counted.
pub const STDERR_LINES_PER_MINUTE: u32 = 60;
/// Last lines of a server's standard error kept for the error when it stops: a
/// server's own words about why it failed (a missing key, a bad argument) are what
/// its owner needs, and they usually come last.
pub const STDERR_TAIL_LINES: usize = 5;
/// How long a stopped server's standard error is read on for its last words.
const STDERR_DRAIN: Duration = Duration::from_secs(1);
/// Pages of a tool list read at most.
const MAX_PAGES: usize = 64;

/// What the supervisor needs from outside.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The servers file (named in errors and as the classes' file).
    pub file: PathBuf,
    /// How long `initialize` and the first tool list may take.
    pub start_timeout: Duration,
    /// Largest result handed to a script.
    pub max_result_bytes: usize,
    /// Bounds of the tool list.
    pub limits: TextLimits,
}

impl Settings {
    /// The largest message accepted from a server: room for a result at the limit
    /// twice over (text and structured content) with JSON escaping, so a result just
    /// over the limit is read and refused with a clear error rather than dropped.
    pub fn max_message_bytes(&self) -> usize {
        self.max_result_bytes
            .saturating_mul(4)
            .saturating_add(64 * 1024)
    }
}

/// Where one server is.
#[derive(Clone)]
pub enum State {
    /// Starting (the first time or again).
    Starting,
    /// Connected, with its class and how each function reaches its tool.
    Up {
        /// The connection.
        peer: Peer<RoleClient>,
        /// The server's tools as a class.
        doc: Arc<ClassDoc>,
        /// Function name to tool.
        calls: Arc<BTreeMap<String, ToolCall>>,
    },
    /// Not running; `retry_at` is the next try.
    Down {
        /// What went wrong.
        error: String,
        /// When it is started again.
        retry_at: Instant,
    },
    /// Stopped with the daemon.
    Stopped,
}

/// A server's class and how each of its functions reaches its tool.
pub type Class = (Arc<ClassDoc>, Arc<BTreeMap<String, ToolCall>>);

/// One configured server and its state, shared by its supervisor and the calls.
pub struct Server {
    /// Its configuration.
    pub spec: ServerSpec,
    state: Mutex<State>,
    /// The class of its last good tool list: kept while it restarts, so a call says
    /// the server is down rather than that the class does not exist, and the prompt
    /// does not change with every restart.
    class: Mutex<Option<Class>>,
    changed: watch::Sender<u64>,
    stderr: Arc<Mutex<Stderr>>,
}

/// What a stdio server wrote to its standard error.
#[derive(Default)]
struct Stderr {
    /// The last [`STDERR_TAIL_LINES`] lines of the current run, shortened.
    tail: VecDeque<String>,
    /// Lines written, over all runs.
    lines: u64,
    /// Lines of them copied into the log.
    logged: u64,
    /// The reader of the current run's standard error.
    reader: Option<tokio::task::JoinHandle<()>>,
}

/// A server as commands and tests see it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerStatus {
    /// Its key in the servers file.
    pub key: String,
    /// Its class under `device`.
    pub class: String,
    /// Where it is.
    pub state: Status,
    /// Lines it wrote to its standard error (stdio servers, all runs).
    pub stderr_lines: u64,
    /// Lines of them copied into the log; the rest were over
    /// [`STDERR_LINES_PER_MINUTE`].
    pub stderr_logged: u64,
}

/// Where a server is, without its connection.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// Starting (the first time or again).
    Starting,
    /// Connected; its functions' names.
    Up {
        /// The class's functions.
        functions: Vec<String>,
    },
    /// Not running: why, with its last words on standard error.
    Down {
        /// What went wrong.
        error: String,
    },
    /// Stopped with the daemon.
    Stopped,
}

impl Server {
    /// A server not started yet; `changed` is bumped whenever its class changes.
    pub fn new(spec: ServerSpec, changed: watch::Sender<u64>) -> Server {
        Server {
            spec,
            state: Mutex::new(State::Starting),
            class: Mutex::new(None),
            changed,
            stderr: Arc::default(),
        }
    }

    /// Its state, function names and standard error counts.
    pub fn status(&self) -> ServerStatus {
        let state = match self.state() {
            State::Starting => Status::Starting,
            State::Up { doc, .. } => Status::Up {
                functions: doc.functions.iter().map(|f| f.name.clone()).collect(),
            },
            State::Down { error, .. } => Status::Down { error },
            State::Stopped => Status::Stopped,
        };
        let stderr = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        ServerStatus {
            key: self.spec.key.clone(),
            class: self.spec.class.clone(),
            state,
            stderr_lines: stderr.lines,
            stderr_logged: stderr.logged,
        }
    }

    /// Its state now.
    pub fn state(&self) -> State {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Its class, once it listed its tools.
    pub fn class(&self) -> Option<Class> {
        self.class.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, state: State) {
        let class = match &state {
            State::Up { doc, calls, .. } => Some((doc.clone(), calls.clone())),
            _ => None,
        };
        // The class first: whoever sees the server up must also see that there is a
        // new class to publish (`Mcp::wait_started`).
        if let Some(class) = class {
            let mut kept = self.class.lock().unwrap_or_else(|e| e.into_inner());
            let same = kept
                .as_ref()
                .is_some_and(|(doc, calls)| **doc == *class.0 && **calls == *class.1);
            *kept = Some(class);
            drop(kept);
            if !same {
                self.changed.send_modify(|n| *n += 1);
            }
        }
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
    }

    /// Keeps the server running until `stop` is cancelled.
    pub async fn supervise(self: Arc<Self>, settings: Settings, stop: CancellationToken) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            self.set(State::Starting);
            let started = Instant::now();
            let ended = tokio::select! {
                ended = self.session(&settings) => ended,
                _ = stop.cancelled() => break,
            };
            // Not up any more; not down until its last words are in the error.
            self.set(State::Starting);
            let ended = self.with_last_words(ended).await;
            if started.elapsed() >= STABLE {
                backoff = FIRST_BACKOFF;
            }
            tracing::warn!(
                server = %self.spec.key,
                retry_in_s = backoff.as_secs(),
                "MCP server down: {ended}"
            );
            self.set(State::Down {
                error: ended,
                retry_at: Instant::now() + backoff,
            });
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.cancelled() => break,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        self.set(State::Stopped);
    }

    /// `ended` and, for a stdio server that wrote to its standard error, the last
    /// lines it wrote (read on for at most [`STDERR_DRAIN`], as its process is gone).
    async fn with_last_words(&self, ended: String) -> String {
        let reader = self
            .stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reader
            .take();
        if let Some(mut reader) = reader
            && tokio::time::timeout(STDERR_DRAIN, &mut reader)
                .await
                .is_err()
        {
            reader.abort();
        }
        let tail = std::mem::take(&mut self.stderr.lock().unwrap_or_else(|e| e.into_inner()).tail);
        if tail.is_empty() {
            return ended;
        }
        let words: Vec<String> = tail.into_iter().collect();
        format!(
            "{ended}; its last words on standard error: {}",
            words.join(" | ")
        )
    }

    /// One connection, from start to its end; returns why it ended.
    async fn session(&self, settings: &Settings) -> String {
        let (list_changed, mut list_rx) = mpsc::channel(1);
        let handler = Handler {
            info: client_info(),
            list_changed,
        };
        // Held for the session: dropping it kills the server's process group.
        let mut child = None;
        let connecting = async {
            match &self.spec.transport {
                Transport::Stdio { .. } => {
                    let (process, stdout, stdin) = self.spawn()?;
                    child = Some(process);
                    let transport = AsyncRwTransport::<RoleClient, _, _>::new(stdout, stdin)
                        .with_max_line_length(settings.max_message_bytes());
                    handler.serve(transport).await.map_err(|e| e.to_string())
                }
                Transport::Http { url, headers } => {
                    let config = http_config(url, headers, settings)?;
                    let transport =
                        StreamableHttpClientTransport::with_client(http_client()?, config);
                    handler.serve(transport).await.map_err(|e| e.to_string())
                }
            }
        };
        let service = match tokio::time::timeout(settings.start_timeout, async {
            let service = connecting.await?;
            let tools = list_tools(service.peer(), settings.limits.max_tools).await?;
            Ok::<_, String>((service, tools))
        })
        .await
        {
            Ok(Ok((service, tools))) => match self.publish(&service, &tools, settings) {
                Ok(()) => service,
                Err(e) => return e,
            },
            Ok(Err(e)) => return format!("could not start it: {e}"),
            Err(_) => {
                return format!(
                    "it did not answer `initialize` and list its tools within {:?} (mcp.start_timeout_ms)",
                    settings.start_timeout
                );
            }
        };
        let closed = service.cancellation_token();
        let peer = service.peer().clone();
        let waiting = service.waiting();
        tokio::pin!(waiting);
        loop {
            tokio::select! {
                quit = &mut waiting => {
                    drop(closed);
                    return match quit {
                        Ok(reason) => format!("the connection ended ({reason:?})"),
                        Err(e) => format!("the connection failed: {e}"),
                    };
                }
                Some(()) = list_rx.recv() => {
                    let listed = tokio::time::timeout(
                        settings.start_timeout,
                        list_tools(&peer, settings.limits.max_tools),
                    )
                    .await
                    .unwrap_or_else(|_| Err("listing the tools again timed out".into()));
                    match listed.and_then(|tools| self.class_of(&peer, &tools, settings)) {
                        Ok(state) => {
                            tracing::info!(server = %self.spec.key, "MCP server's tools changed; listed again");
                            self.set(state);
                        }
                        Err(e) => {
                            closed.cancel();
                            return format!("its new tool list was refused: {e}");
                        }
                    }
                }
            }
        }
    }

    fn publish<S: rmcp::Service<RoleClient>>(
        &self,
        service: &RunningService<RoleClient, S>,
        tools: &[Tool],
        settings: &Settings,
    ) -> Result<(), String> {
        let state = self
            .class_of(service.peer(), tools, settings)
            .map_err(|e| format!("its tool list was refused: {e}"))?;
        if let State::Up { doc, .. } = &state {
            tracing::info!(
                server = %self.spec.key,
                class = %self.spec.class,
                functions = doc.functions.len(),
                "MCP server started"
            );
        }
        self.set(state);
        Ok(())
    }

    fn class_of(
        &self,
        peer: &Peer<RoleClient>,
        tools: &[Tool],
        settings: &Settings,
    ) -> Result<State, String> {
        let info = peer.peer_info();
        let title = info
            .as_ref()
            .and_then(|i| i.server_info.as_ref())
            .map(|s| s.title.clone().unwrap_or_else(|| s.name.clone()))
            .unwrap_or_default();
        let instructions = info
            .as_ref()
            .and_then(|i| i.instructions.clone())
            .unwrap_or_default();
        let (doc, calls) = tools::class(
            &self.spec,
            &settings.file,
            &title,
            &instructions,
            tools,
            settings.limits,
        )?;
        Ok(State::Up {
            peer: peer.clone(),
            doc: Arc::new(doc),
            calls: Arc::new(calls),
        })
    }

    /// Starts the stdio server: a clean environment plus its `env`, its own process
    /// group (so it and whatever it starts are stopped together), standard error into
    /// our log.
    fn spawn(
        &self,
    ) -> Result<
        (
            ChildGroup,
            tokio::process::ChildStdout,
            tokio::process::ChildStdin,
        ),
        String,
    > {
        let Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } = &self.spec.transport
        else {
            return Err("not a stdio server".into());
        };
        let mut cmd = tokio::process::Command::new(command);
        cmd.args(args)
            .env_clear()
            .envs(
                INHERITED_ENV
                    .iter()
                    .filter_map(|k| Some((k, std::env::var_os(k)?))),
            )
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd.spawn().map_err(|e| {
            format!("cannot start `{command}`: {e} (is it installed and on PATH? give its full path in \"command\")")
        })?;
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err("its standard input and output could not be connected".into());
        };
        if let Some(stderr) = child.stderr.take() {
            let reader = tokio::spawn(log_stderr(
                self.spec.key.clone(),
                stderr,
                self.stderr.clone(),
            ));
            let mut kept = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(old) = kept.reader.replace(reader) {
                old.abort();
            }
        }
        Ok((ChildGroup(child), stdout, stdin))
    }

    /// Calls `tool` with `arguments`, answering on `done`; the call is abandoned (and
    /// the server told so) when the returned task is aborted.
    pub fn start_call(
        &self,
        runtime: &tokio::runtime::Handle,
        call: &ToolCall,
        arguments: serde_json::Map<String, serde_json::Value>,
        done: std::sync::mpsc::SyncSender<Result<rmcp::model::CallToolResult, String>>,
    ) -> Result<tokio::task::JoinHandle<()>, String> {
        let peer = match self.state() {
            State::Up { peer, .. } => peer,
            State::Starting => {
                return Err(format!(
                    "the MCP server `{}` is starting; try again in a moment",
                    self.spec.key
                ));
            }
            State::Down { error, retry_at } => {
                return Err(format!(
                    "the MCP server `{}` is not running ({error}); it is started again in {} s",
                    self.spec.key,
                    retry_at.saturating_duration_since(Instant::now()).as_secs() + 1
                ));
            }
            State::Stopped => {
                return Err(format!(
                    "the MCP server `{}` was stopped with the daemon",
                    self.spec.key
                ));
            }
        };
        // Its process ended a moment ago and the supervisor has not seen it yet.
        if peer.is_transport_closed() {
            return Err(format!(
                "the MCP server `{}` is not running (its connection closed); it is being started again",
                self.spec.key
            ));
        }
        let params = CallToolRequestParams::new(call.tool.clone()).with_arguments(arguments);
        Ok(runtime.spawn(async move {
            let result = peer.call_tool(params).await.map_err(|e| e.to_string());
            let _ = done.send(result);
        }))
    }
}

/// Our side of the connection: who we are, and a nudge when the tools change.
struct Handler {
    info: InitializeRequestParams,
    list_changed: mpsc::Sender<()>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> InitializeRequestParams {
        self.info.clone()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // A nudge already waiting covers this one too.
        let _ = self.list_changed.try_send(());
    }
}

fn client_info() -> InitializeRequestParams {
    InitializeRequestParams::new(
        ClientCapabilities::default(),
        Implementation::new("strawberry-spoke", env!("CARGO_PKG_VERSION")),
    )
}

/// The HTTP client of a Streamable HTTP server: rustls on ring like the hub client,
/// no redirects (a redirect could carry the headers, e.g. a token, elsewhere), no idle
/// connections kept (the SDK's advice: a reused connection can stall on delayed ACKs).
fn http_client() -> Result<reqwest::Client, String> {
    // reqwest is built without a default crypto provider; ring is ours. A second
    // install (another client in the same process) is not an error.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot set up HTTP(S): {e}"))
}

fn http_config(
    url: &str,
    headers: &BTreeMap<String, String>,
    settings: &Settings,
) -> Result<StreamableHttpClientTransportConfig, String> {
    let mut custom = std::collections::HashMap::new();
    for (name, value) in headers {
        let name = reqwest::header::HeaderName::try_from(name.as_str())
            .map_err(|e| format!("header {:?}: {e}", clean_line(name)))?;
        let mut value = reqwest::header::HeaderValue::try_from(value.as_str())
            .map_err(|e| format!("the value of header {name}: {e}"))?;
        value.set_sensitive(true);
        custom.insert(name, value);
    }
    let max = settings.max_message_bytes();
    Ok(
        StreamableHttpClientTransportConfig::with_uri(url.to_string())
            .custom_headers(custom)
            .max_json_response_size(max)
            .max_sse_event_size(max),
    )
}

/// The whole tool list, page by page, refused past `max_tools`.
async fn list_tools(peer: &Peer<RoleClient>, max_tools: usize) -> Result<Vec<Tool>, String> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let page = peer
            .list_tools(cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c))))
            .await
            .map_err(|e| format!("listing its tools failed: {e}"))?;
        tools.extend(page.tools);
        if tools.len() > max_tools {
            return Err(format!(
                "it lists more than {max_tools} tools (mcp.max_tools)"
            ));
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(tools),
        }
    }
    Err(format!(
        "its tool list goes on for more than {MAX_PAGES} pages"
    ))
}

/// Copies a server's standard error into our log, line by line, each line shortened
/// and at most [`STDERR_LINES_PER_MINUTE`] a minute (a chatty or broken server cannot
/// flood the journal); the last lines are kept in `kept` for the error when it stops.
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr, kept: Arc<Mutex<Stderr>>) {
    let mut reader = tokio::io::BufReader::new(stderr);
    let mut line = Vec::new();
    let mut window = Instant::now();
    let mut logged = 0u32;
    let mut dropped = 0u32;
    loop {
        line.clear();
        // Reads at most a bounded amount per line: the rest of a long line is skipped.
        match read_bounded_line(&mut reader, &mut line, STDERR_LINE_BYTES).await {
            Ok(false) => break,
            Ok(true) => {}
            Err(_) => break,
        }
        if window.elapsed() >= Duration::from_secs(60) {
            if dropped > 0 {
                tracing::warn!(%server, dropped, "MCP server wrote more to stderr than is logged");
            }
            window = Instant::now();
            logged = 0;
            dropped = 0;
        }
        let text = clean_line(&String::from_utf8_lossy(&line));
        let log = logged < STDERR_LINES_PER_MINUTE;
        if log {
            logged += 1;
            tracing::info!(%server, "stderr: {text}");
        } else {
            dropped += 1;
        }
        let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.lines += 1;
        kept.logged += u64::from(log);
        if kept.tail.len() == STDERR_TAIL_LINES {
            kept.tail.pop_front();
        }
        kept.tail.push_back(text);
    }
    if dropped > 0 {
        tracing::warn!(%server, dropped, "MCP server wrote more to stderr than is logged");
    }
}

/// Reads one line into `line` keeping at most `max` bytes of it; false at the end.
async fn read_bounded_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<bool> {
    let mut any = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(any);
        }
        any = true;
        let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        let room = max.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = found.unwrap_or(buf.len());
        reader.consume(used);
        if found.is_some() {
            return Ok(true);
        }
    }
}

/// A stdio server's process; dropping it kills the server's whole process group
/// (a server started through `npx` or `uvx` is several processes).
struct ChildGroup(tokio::process::Child);

impl Drop for ChildGroup {
    fn drop(&mut self) {
        if let Some(pid) = self.0.id().and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill(2) has no memory effects; the child is not reaped yet
            // (`id()` is `Some`), so its pid, its process group's id from
            // `process_group(0)`, cannot have been reused.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.0.start_kill();
    }
}
