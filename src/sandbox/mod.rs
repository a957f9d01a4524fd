//! The wasmtime sandbox that runs model-written Rhai (DESIGN.md 2.3).

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
    /// Bytes of `print`/`debug` output.
    pub output_bytes: usize,
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
}

/// The limit that ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// [`Limits::wall_time`].
    Time,
    /// [`Limits::memory_bytes`].
    Memory,
    /// [`Limits::max_operations`].
    Operations,
    /// [`Limits::output_bytes`].
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
            LimitKind::Memory => "memory",
            LimitKind::Operations => "operations",
            LimitKind::Output => "output",
            LimitKind::DataSize => "data size",
            LimitKind::Depth => "nesting depth",
        })
    }
}
