//! Runs skill files and host API snippets in a real Rhai engine with the real host API.
//!
//! This is the one place that knows how a skill is called: a fresh engine, the host API
//! registered for the skill's class, the file compiled, the function called under the
//! call's deadline. Once the registry is merged this can become `Registry::load` +
//! `Registry::call` without touching the tests.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rhai::{AST, Dynamic, Engine, FuncArgs, Scope};
use strawberry_spoke::skills::deadline;
use strawberry_spoke::skills::host_api::{self, HostSettings, SkillContext};
use strawberry_spoke::skills::storage::Store;

/// The bundled skills folder of this crate.
pub fn skills_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("skills")
}

/// A loaded skill file, or a bare engine with the host API when there is no file.
pub struct Skill {
    engine: Engine,
    ast: AST,
    /// The context the host API was registered with.
    pub ctx: Arc<SkillContext>,
}

/// An engine with the host API for skill class `class`, storing below `settings.data_dir`.
pub fn engine(class: &str, settings: HostSettings) -> (Engine, Arc<SkillContext>) {
    let store = Store::open(&settings.data_dir, class).unwrap_or_else(|e| panic!("{e}"));
    let ctx = Arc::new(SkillContext {
        class: class.to_string(),
        settings,
        store,
    });
    let mut engine = Engine::new();
    host_api::register(&mut engine, ctx.clone());
    (engine, ctx)
}

/// Settings with test-friendly defaults and the given data directory.
pub fn settings(data_dir: &Path) -> HostSettings {
    HostSettings {
        data_dir: data_dir.to_path_buf(),
        ..HostSettings::default()
    }
}

/// The class a skill file declares with `//! @class`.
fn class_of(source: &str, file: &str) -> String {
    source
        .lines()
        .find_map(|l| l.trim().strip_prefix("//! @class "))
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|| panic!("{file} has no @class line"))
}

impl Skill {
    /// Loads `skills/<file>` with its storage below `data_dir`.
    pub fn load(file: &str, data_dir: &Path) -> Skill {
        Skill::load_with(file, settings(data_dir))
    }

    /// Loads `skills/<file>` with the given settings.
    pub fn load_with(file: &str, settings: HostSettings) -> Skill {
        let path = skills_dir().join(file);
        let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let (engine, ctx) = engine(&class_of(&source, file), settings);
        let ast = engine
            .compile(&source)
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        Skill { engine, ast, ctx }
    }

    /// Calls `func` with all its arguments (defaults are the registry's job), within
    /// the call timeout; a failure comes back as its message.
    pub fn call(&self, func: &str, args: impl FuncArgs) -> Result<Dynamic, String> {
        let until = Instant::now() + self.ctx.settings.call_timeout;
        deadline::with_deadline(until, || {
            self.engine
                .call_fn::<Dynamic>(&mut Scope::new(), &self.ast, func, args)
                .map_err(|e| e.to_string())
        })
    }

    /// Like [`Skill::call`], panicking with the message on failure.
    pub fn ok(&self, func: &str, args: impl FuncArgs) -> Dynamic {
        self.call(func, args)
            .unwrap_or_else(|e| panic!("{func} failed: {e}"))
    }
}

/// Reads field `key` of a map result as `T`.
pub fn field<T: Clone + 'static>(map: &Dynamic, key: &str) -> T {
    let m = map
        .read_lock::<rhai::Map>()
        .unwrap_or_else(|| panic!("not a map: {map}"));
    let v = m
        .get(key)
        .unwrap_or_else(|| panic!("no field `{key}` in {map}"));
    v.clone()
        .try_cast::<T>()
        .unwrap_or_else(|| panic!("field `{key}` is a {}: {v}", v.type_name()))
}

/// A string array result as `Vec<String>`.
pub fn strings(value: &Dynamic) -> Vec<String> {
    value
        .clone()
        .into_array()
        .unwrap_or_else(|t| panic!("not an array but {t}: {value}"))
        .into_iter()
        .map(|v| v.to_string())
        .collect()
}
