//! The wasmtime sandbox that runs model-written Rhai (docs/architecture.md, "The sandbox").
//!
//! Model-written code is untrusted: it runs in a Rhai interpreter compiled to wasm
//! (the `src/guest/` crate), in a fresh wasmtime instance per run, and its only way out
//! is the `device` object, whose requests reach a [`DeviceHandler`] as JSON. Each run
//! is bounded in memory, the script's own time, the run's total time (skill calls
//! included), output, the size of its value and Rhai's own operation, size and depth
//! counts, can be cancelled from outside ([`Cancel`]), and ends in exactly one
//! [`RunOutcome`].
//!
//! Two clocks, because they guard against different things: the script's time
//! (`sandbox.timeout_ms`) stops runaway code and does not count skill calls, which
//! have their own timeout; the total (`sandbox.total_timeout_ms`) is what the person
//! waiting can afford, so it counts everything, and each skill call inside the run gets
//! at most what is left of it through [`crate::deadline`].

mod engine_config;
mod runtime;

pub use crate::deadline::Cancel;
pub use runtime::{Sandbox, SandboxError};

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What model code asks of the host through the `device` object: the one way out of
/// the sandbox. It crosses the bridge as JSON, tagged by `op`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum DeviceRequest {
    /// `device.search_skills(query)`; an empty query lists everything.
    SearchSkills { query: String },
    /// `device.get_skill_info(class)`.
    GetSkillInfo { class: String },
    /// `device.get_function_info(name)`, `name` is `"Class.fn"` or a unique `"fn"`.
    GetFunctionInfo { name: String },
    /// `device.Class.fn(args...)` or `devices["name"].Class.fn(args...)`. Arguments
    /// are passed as written: named arguments arrive as a single map.
    Call {
        device: Option<String>,
        class: String,
        function: String,
        args: Vec<serde_json::Value>,
    },
}

/// The host side of the `device` object. Errors are messages the script can read
/// (and the model can act on), so they name the problem and the fix.
pub trait DeviceHandler: Send + Sync {
    /// Answers one request from the guest.
    fn handle(&self, request: DeviceRequest) -> Result<serde_json::Value, String>;
}

/// Limits for one run. Every run gets all of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Linear memory of the guest, in bytes.
    pub memory_bytes: u64,
    /// Wall-clock time of the script, not counting time spent inside skill calls
    /// (those have their own timeout).
    pub wall_time: Duration,
    /// Wall-clock time of the whole run, skill calls (local and remote) included.
    pub total_time: Duration,
    /// Bytes of `print`/`debug` output.
    pub output_bytes: usize,
    /// Bytes of the run's value, serialised as JSON.
    pub result_bytes: usize,
    /// Rhai operations.
    pub max_operations: u64,
    /// Longest string, in bytes.
    pub max_string_size: usize,
    /// Most elements in one array.
    pub max_array_size: usize,
    /// Most entries in one object map.
    pub max_map_size: usize,
    /// Deepest function-call nesting.
    pub max_call_depth: usize,
    /// Deepest expression nesting.
    pub max_expr_depth: usize,
}

/// How a run ended, besides its output.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// Everything the script printed, in order, up to the output limit.
    pub output: String,
    /// The value of the script's last expression, or why there is none.
    pub result: Result<serde_json::Value, RunError>,
    /// Wall-clock time of the whole run.
    pub elapsed: Duration,
    /// Part of `elapsed` spent inside device calls.
    pub device_time: Duration,
    /// Number of device calls made.
    pub device_calls: u32,
}

/// Why a run produced no value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RunError {
    /// The code does not parse.
    #[error("syntax error at line {line}, column {column}: {message}")]
    Syntax {
        message: String,
        line: usize,
        column: usize,
    },
    /// The code threw, or a device call failed and was not caught.
    #[error("runtime error at line {line}, column {column}: {message}")]
    Runtime {
        message: String,
        line: usize,
        column: usize,
    },
    /// The run hit one of its [`Limits`].
    #[error("{limit} limit reached: {message}")]
    Limit { limit: LimitKind, message: String },
    /// The run was cancelled through its [`Cancel`] token before it finished.
    #[error(
        "cancelled: the request this code served was stopped (a new command, the stop phrase or shutdown)"
    )]
    Cancelled,
}

/// The limit that ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// [`Limits::wall_time`].
    Time,
    /// [`Limits::total_time`].
    TotalTime,
    /// [`Limits::memory_bytes`].
    Memory,
    /// [`Limits::max_operations`].
    Operations,
    /// [`Limits::output_bytes`] or [`Limits::result_bytes`].
    Output,
    /// A string, array or map grew past its limit.
    DataSize,
    /// Call or expression nesting too deep.
    Depth,
}

impl std::fmt::Display for LimitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LimitKind::Time => "time",
            LimitKind::TotalTime => "total time",
            LimitKind::Memory => "memory",
            LimitKind::Operations => "operations",
            LimitKind::Output => "output",
            LimitKind::DataSize => "data size",
            LimitKind::Depth => "nesting depth",
        })
    }
}

/// Sizes chosen for a spoke answering one voice request: ample for any script a
/// model writes to serve it, small enough that a runaway script ends quickly and
/// several runs fit on a Raspberry Pi.
///
/// - memory 32 MiB: the interpreter itself needs ~2 MiB; the rest is data.
/// - wall time 5 s: well past any sensible script; skill calls are not counted.
/// - total time 30 s: a few slow skill calls (10 s each at most by default) fit; far
///   less than the daemon's 300 s stuck-turn watchdog, and about as long as anyone
///   waits for a spoken answer.
/// - output 64 KiB: far more than a model should read back.
/// - value 64 KiB as JSON: the same for what the last expression returns.
/// - 5 million operations: ~0.2-0.4 s of busy looping in the sandbox; it stops
///   a runaway loop long before the wall clock would.
/// - strings 64 KiB, arrays and maps 10 000 entries: Rhai re-measures a container on
///   every change (quadratic), so these stay modest; the memory cap is the backstop.
/// - call depth 48, expression depth 64: deep enough for any sane script; the
///   sandbox's stack holds more, so Rhai reports the limit before wasm runs out.
///   (Past it, the stack overflow is still reported as the depth limit.)
///
/// As in Rhai, 0 for one of the Rhai limits (operations, sizes, depths) means none.
impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 32 * 1024 * 1024,
            wall_time: Duration::from_secs(5),
            total_time: Duration::from_secs(30),
            output_bytes: 64 * 1024,
            result_bytes: 64 * 1024,
            max_operations: 5_000_000,
            max_string_size: 64 * 1024,
            max_array_size: 10_000,
            max_map_size: 10_000,
            max_call_depth: 48,
            max_expr_depth: 64,
        }
    }
}
