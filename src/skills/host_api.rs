//! The host API skill code can call.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::storage::Store;

/// What skills may do on the host, from the `[skills]` config section.
#[derive(Debug, Clone, PartialEq)]
pub struct HostSettings {
    /// Root of persistent data; each skill's storage lives below it.
    pub data_dir: PathBuf,
    /// Timeout of one skill call, everything it does included.
    pub call_timeout: Duration,
    /// Default timeout of one `command(...)`.
    pub command_timeout: Duration,
    /// Default timeout of one HTTP request.
    pub http_timeout: Duration,
    /// Largest HTTP response body accepted, in bytes.
    pub http_max_bytes: usize,
    /// Largest file `read_file` returns, in bytes.
    pub file_max_bytes: usize,
}

/// What one skill's engine knows about itself.
pub struct SkillContext {
    /// The skill class, e.g. `ClockSkill`; names its storage and log lines.
    pub class: String,
    /// The host settings in force.
    pub settings: HostSettings,
    /// This skill's persistent key/value store.
    pub store: Store,
}

/// Registers the host API in a skill's engine.
pub fn register(engine: &mut rhai::Engine, ctx: Arc<SkillContext>) {
    let _ = (engine, ctx);
}
