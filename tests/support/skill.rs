//! Runs bundled skill files through the real registry, and host API snippets in a real
//! Rhai engine with the real host API.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rhai::{Dynamic, Engine, FuncArgs};
use strawberry_spoke::host::storage::Store;
use strawberry_spoke::host::{self, HostSettings, SkillContext};
use strawberry_spoke::skills::Registry;

/// The bundled skills folder of this crate.
pub fn skills_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("skills")
}

/// A bundled skill file, loaded the way the daemon loads it.
pub struct Skill {
    registry: Registry,
    class: String,
    /// The host settings the skill was loaded with.
    pub settings: HostSettings,
}

/// An engine with the host API for skill class `class`, storing below `settings.data_dir`.
pub fn engine(class: &str, settings: HostSettings) -> (Engine, Arc<SkillContext>) {
    let store =
        Store::open(&settings.data_dir, class, settings.storage).unwrap_or_else(|e| panic!("{e}"));
    let ctx = Arc::new(SkillContext {
        class: class.to_string(),
        settings,
        store,
    });
    let mut engine = Engine::new();
    host::register(&mut engine, ctx.clone());
    (engine, ctx)
}

/// Settings with test-friendly defaults and the given data directory.
pub fn settings(data_dir: &Path) -> HostSettings {
    HostSettings {
        data_dir: data_dir.to_path_buf(),
        ..HostSettings::default()
    }
}

/// Settings for registry tests: short timeouts, storage in the system temp dir.
pub fn quick_settings() -> HostSettings {
    HostSettings {
        call_timeout: std::time::Duration::from_secs(2),
        command_timeout: std::time::Duration::from_secs(1),
        http_timeout: std::time::Duration::from_secs(1),
        ..settings(&std::env::temp_dir())
    }
}

impl Skill {
    /// Loads `skills/<file>` with its storage below `data_dir`.
    pub fn load(file: &str, data_dir: &Path) -> Skill {
        Skill::load_with(file, settings(data_dir))
    }

    /// Loads `skills/<file>` with the given settings, through the registry's loader, so
    /// its doc comments and signatures are checked exactly as at start-up.
    pub fn load_with(file: &str, settings: HostSettings) -> Skill {
        let class = Registry::load_file(&skills_dir().join(file), &settings)
            .unwrap_or_else(|e| panic!("{e}"));
        let name = class.name.clone();
        Skill {
            registry: Registry::new(vec![class], settings.clone()),
            class: name,
            settings,
        }
    }

    /// Calls `func` through the registry (argument binding, defaults, deadline, value
    /// conversion); a failure comes back as its message.
    pub fn call(&self, func: &str, args: impl FuncArgs) -> Result<Dynamic, String> {
        let mut values: Vec<Dynamic> = Vec::new();
        args.parse(&mut values);
        let json: Vec<serde_json::Value> = values
            .iter()
            .map(|v| rhai::serde::from_dynamic(v).unwrap_or_else(|e| panic!("argument {v}: {e}")))
            .collect();
        let result = self
            .registry
            .call(&self.class, func, &json)
            .map_err(|e| e.to_string())?;
        Ok(rhai::serde::to_dynamic(&result).unwrap_or_else(|e| panic!("result {result}: {e}")))
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
