//! MCP servers as skill classes: tools people already publish as Model Context
//! Protocol servers, reached from model-written code like any skill.
//!
//! `mcp.config_file` names a JSON file in the format every MCP client reads
//! (`mcpServers`, [`file`]), so a server's README example is pasted as it is. Each
//! server becomes one class under `device` (`"time"` is `device.Time`), each tool a
//! function whose signature comes from its input schema ([`tools`]). The classes join
//! the skill files' in the [`LiveRegistry`], so search, embedding, the prompt, the
//! `@confirm`/`@remote` policy and the MQTT registration treat them like any skill;
//! only running a function differs ([`ClassRuntime`]): it is a `tools/call` on the
//! server, made with the official SDK (`rmcp`).
//!
//! A call keeps every bound a skill call has: its own timeout (the server's
//! `timeout_ms` or `skills.call_timeout_ms`) inside the run's total, cancellation with
//! the turn (the server is told), a cap on the result (`mcp.max_result_bytes`). A
//! server is as trusted as a skill file (it runs with the daemon's user), but what it
//! sends is bounded like any outside input: the message size, the tool list
//! (`mcp.max_tools`, `mcp.max_text_bytes`), its stderr in the log (a minute's share of
//! it; its last lines go into the error when it stops, since they usually say why).
//! Servers start in the background ([`server`]): one that hangs or dies does not hold
//! the daemon up, it is restarted with backoff and its calls say so meanwhile;
//! [`Mcp::status`] tells commands (`skills check`) where each server is.

pub mod file;
pub mod server;
pub mod tools;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::deadline;
use crate::skills::watch::LiveRegistry;
use crate::skills::{CallError, ClassRuntime, SkillClass, SkillFunction};
use crate::text::clean_text;
use server::{Server, State};
pub use server::{ServerStatus, Settings as McpSettings, Status};
pub use tools::TextLimits;
use tools::ToolCall;

/// Why the MCP servers could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The servers file is unreadable or wrong.
    #[error("MCP servers file {}: {message}", file.display())]
    File {
        /// The file.
        file: PathBuf,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A server's class has the name of a skill file's class.
    #[error(
        "the MCP server `{server}` in {} would be the skill class `{class}`, which the skill file {} already defines; rename the server's key or the skill's class",
        file.display(),
        skill_file.display()
    )]
    Clash {
        /// The server's key.
        server: String,
        /// The class name both have.
        class: String,
        /// The servers file.
        file: PathBuf,
        /// The skill file.
        skill_file: PathBuf,
    },
}

/// The running MCP servers of this process.
pub struct Mcp {
    servers: Vec<Arc<Server>>,
    changed: watch::Sender<u64>,
    published: watch::Receiver<u64>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Mcp {
    /// Reads `settings.file` and starts every server in it on the current tokio
    /// runtime, in the background; their classes join `live` as they come up (and
    /// leave it while they are down), and `on_change` runs after each change (to
    /// publish the registration again).
    ///
    /// A server whose class has the name of a class in `live` (the skill files') is
    /// refused here, naming both. They stop (processes killed) when `stop` is cancelled
    /// or [`Mcp::shutdown`] is called.
    pub fn start(
        settings: &McpSettings,
        live: Arc<LiveRegistry>,
        on_change: impl Fn() + Send + Sync + 'static,
        stop: &CancellationToken,
    ) -> Result<Mcp, McpError> {
        let path = &settings.file;
        let specs = file::read(path)?;
        let registry = live.current();
        for spec in &specs {
            if let Some(local) = registry.class(&spec.class) {
                return Err(McpError::Clash {
                    server: spec.key.clone(),
                    class: spec.class.clone(),
                    file: path.clone(),
                    skill_file: local.file.clone(),
                });
            }
        }
        let stop = stop.child_token();
        let (changed, changed_rx) = watch::channel(0u64);
        let (published_tx, published) = watch::channel(0u64);
        let servers: Vec<Arc<Server>> = specs
            .into_iter()
            .map(|spec| Arc::new(Server::new(spec, changed.clone())))
            .collect();
        let mut tasks: Vec<_> = servers
            .iter()
            .map(|s| tokio::spawn(s.clone().supervise(settings.clone(), stop.clone())))
            .collect();
        tracing::info!(file = %path.display(), servers = servers.len(), "starting MCP servers");
        let publisher = Publisher {
            servers: servers.clone(),
            runtime: tokio::runtime::Handle::current(),
            max_result_bytes: settings.max_result_bytes,
            file: path.clone(),
        };
        tasks.push(tokio::spawn(publisher.run(
            changed_rx,
            stop.clone(),
            live,
            Arc::new(on_change),
            published_tx,
        )));
        Ok(Mcp {
            servers,
            changed,
            published,
            stop,
            tasks,
        })
    }

    /// Waits until every server has started (and its class is in the registry) or
    /// failed its first start, at most `limit`; whether they all got that far. For
    /// one-shot commands (`exec`), which have no later to wait for.
    pub async fn wait_started(&self, limit: Duration) -> bool {
        let until = tokio::time::Instant::now() + limit;
        loop {
            let starting = self
                .servers
                .iter()
                .any(|s| matches!(s.state(), State::Starting));
            if !starting && *self.published.borrow() >= *self.changed.borrow() {
                return true;
            }
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Each server's state, in the servers file's order.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.servers.iter().map(|s| s.status()).collect()
    }

    /// Stops every server (stdio servers' processes are killed) and waits for it.
    pub async fn shutdown(self) {
        self.stop.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Keeps the registry's MCP classes in step with the servers.
struct Publisher {
    servers: Vec<Arc<Server>>,
    runtime: tokio::runtime::Handle,
    max_result_bytes: usize,
    file: PathBuf,
}

impl Publisher {
    async fn run(
        self,
        mut changed: watch::Receiver<u64>,
        stop: CancellationToken,
        live: Arc<LiveRegistry>,
        on_change: Arc<dyn Fn() + Send + Sync>,
        published: watch::Sender<u64>,
    ) {
        loop {
            tokio::select! {
                c = changed.changed() => if c.is_err() { return },
                _ = stop.cancelled() => return,
            }
            let generation = *changed.borrow_and_update();
            let classes = self.classes();
            let live = live.clone();
            // Indexing embeds the functions' text: off the async workers.
            let _ = tokio::task::spawn_blocking(move || live.set_external(classes)).await;
            published.send_replace(generation);
            on_change();
        }
    }

    fn classes(&self) -> Vec<SkillClass> {
        self.servers
            .iter()
            .filter_map(|server| {
                let (doc, calls) = server.class()?;
                Some(SkillClass::external(
                    (*doc).clone(),
                    self.file.clone(),
                    Arc::new(ToolRuntime {
                        server: server.clone(),
                        calls,
                        runtime: self.runtime.clone(),
                        max_result_bytes: self.max_result_bytes,
                    }),
                ))
            })
            .collect()
    }
}

/// Runs a server's functions: each is a `tools/call`.
struct ToolRuntime {
    server: Arc<Server>,
    calls: Arc<std::collections::BTreeMap<String, ToolCall>>,
    runtime: tokio::runtime::Handle,
    max_result_bytes: usize,
}

/// Longest error message of a server passed on to the script.
const MAX_ERROR_BYTES: usize = 2_000;

impl ClassRuntime for ToolRuntime {
    fn call(
        &self,
        f: &SkillFunction,
        args: Vec<Value>,
        default_timeout: Duration,
    ) -> Result<Value, CallError> {
        let function = f.qualified_name();
        let key = &self.server.spec.key;
        let failed = |message: String| CallError::Failed { message };
        let call = self.calls.get(&f.name).ok_or_else(|| {
            failed(format!(
                "{function}: the MCP server `{key}` no longer lists this tool"
            ))
        })?;
        let arguments = call.arguments(f, args);
        let timeout = self.server.spec.timeout(default_timeout);
        let result = deadline::with_deadline(Instant::now() + timeout, || {
            let (done, answer) = std::sync::mpsc::sync_channel(1);
            let task = self
                .server
                .start_call(&self.runtime, call, arguments, done)
                .map_err(|e| failed(format!("{function}: {e}")))?;
            // Dropping the call's future (the task) tells the server it was cancelled.
            let _abort = AbortOnDrop(task);
            loop {
                match answer.recv_timeout(deadline::bounded(deadline::SLICE)) {
                    Ok(result) => break Ok(result),
                    Err(RecvTimeoutError::Timeout) if deadline::expired() => {
                        break Err(if deadline::cancelled() {
                            failed(format!(
                                "{function}: stopped because the request it served was cancelled"
                            ))
                        } else if deadline::bound_by_run() {
                            failed(format!(
                                "{function}: stopped because the run's time ran out (sandbox.total_timeout_ms)"
                            ))
                        } else {
                            CallError::Timeout {
                                function: function.clone(),
                                after: timeout,
                            }
                        });
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        break Err(failed(format!(
                            "{function}: the call to the MCP server `{key}` stopped unexpectedly"
                        )));
                    }
                }
            }
        })?;
        let result = result.map_err(|e| {
            failed(format!(
                "{function}: the MCP server `{key}` did not answer: {e}"
            ))
        })?;
        if result.is_error == Some(true) {
            let message = tools::shorten(&clean_text(&tools::text(&result)), MAX_ERROR_BYTES);
            return Err(failed(format!(
                "{function} failed on the MCP server `{key}`: {message}"
            )));
        }
        let value = tools::value(&result);
        let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
        if size > self.max_result_bytes {
            return Err(failed(format!(
                "{function} returned {size} bytes, over the limit of {} (mcp.max_result_bytes); ask it for less",
                self.max_result_bytes
            )));
        }
        Ok(value)
    }
}

/// Aborts a call's task when the caller stops waiting for it.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
