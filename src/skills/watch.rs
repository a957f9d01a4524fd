//! Hot reload: the skills folder is watched and changes take effect while running.
//!
//! Polling (every 250 ms, comparing modification time and size) rather than inotify:
//! it is a handful of `stat` calls, works on every file system (including the network
//! and overlay mounts small boards use), and needs no extra dependency. A file that
//! fails to load is reported and its previous good version stays in service, so a typo
//! saved in an editor never takes a working skill away.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use super::{LoadError, Registry, SkillClass};
use crate::host::HostSettings;

/// How often the folder is looked at.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// The current registry, replaced as a whole on every reload; readers take a snapshot
/// with [`LiveRegistry::current`] and are never blocked by a reload in progress.
///
/// It is made of two parts that change independently: the classes of the skill files
/// (hot reload) and classes from outside the folder (MCP servers, whose tools come and
/// go as the servers start, die and change their lists). A file's class wins a name
/// both have: the daemon refuses such a clash at start, so one only arises when a file
/// is added later, and is logged.
#[derive(Debug)]
pub struct LiveRegistry {
    current: RwLock<Arc<Registry>>,
    parts: Mutex<Parts>,
}

#[derive(Debug)]
struct Parts {
    files: Vec<SkillClass>,
    external: Vec<SkillClass>,
    settings: HostSettings,
}

impl LiveRegistry {
    /// Starts with `registry` as the skill files' classes.
    pub fn new(registry: Arc<Registry>) -> LiveRegistry {
        LiveRegistry {
            parts: Mutex::new(Parts {
                files: registry.classes().to_vec(),
                external: Vec::new(),
                settings: registry.settings().clone(),
            }),
            current: RwLock::new(registry),
        }
    }

    /// The registry in service now.
    pub fn current(&self) -> Arc<Registry> {
        // A poisoned lock still holds a complete registry: it is only ever swapped whole.
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the classes from outside the skills folder with `classes`.
    pub fn set_external(&self, classes: Vec<SkillClass>) {
        let mut parts = self.parts.lock().unwrap_or_else(|e| e.into_inner());
        parts.external = classes;
        self.rebuild(&parts);
    }

    fn set_files(&self, classes: Vec<SkillClass>) {
        let mut parts = self.parts.lock().unwrap_or_else(|e| e.into_inner());
        parts.files = classes;
        self.rebuild(&parts);
    }

    fn rebuild(&self, parts: &Parts) {
        for class in &parts.external {
            if let Some(file) = parts.files.iter().find(|f| f.name == class.name) {
                tracing::warn!(
                    class = %class.name,
                    skill_file = %file.file.display(),
                    from = %class.file.display(),
                    "two classes have one name; the skill file's is in service (rename one of them)"
                );
            }
        }
        let classes = parts.files.iter().chain(&parts.external).cloned().collect();
        let registry = Registry::new(classes, parts.settings.clone());
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(registry);
    }
}

/// What one file looked like when last loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

/// Watches one folder and keeps a [`LiveRegistry`] in step with it.
#[derive(Debug)]
pub struct Watcher {
    dir: PathBuf,
    settings: HostSettings,
    live: Arc<LiveRegistry>,
    stamps: BTreeMap<PathBuf, Stamp>,
    /// The last good class of every file that ever loaded, by file.
    good: BTreeMap<PathBuf, SkillClass>,
}

/// What one look at the folder changed.
#[derive(Debug, Default)]
pub struct Reload {
    /// Files (re)loaded or removed: the registry was replaced.
    pub changed: Vec<PathBuf>,
    /// Files that failed to load; their previous good version (if any) stays.
    pub errors: Vec<LoadError>,
}

impl Watcher {
    /// Loads `dir` and returns the watcher with its live registry and the first load's
    /// errors.
    pub fn start(dir: &Path, settings: &HostSettings) -> (Watcher, Vec<LoadError>) {
        let (registry, errors) = Registry::load(dir, settings);
        let good = registry
            .classes()
            .iter()
            .map(|c| (c.file.clone(), c.clone()))
            .collect();
        let watcher = Watcher {
            dir: dir.to_path_buf(),
            settings: settings.clone(),
            live: Arc::new(LiveRegistry::new(Arc::new(registry))),
            stamps: scan(dir),
            good,
        };
        (watcher, errors)
    }

    /// The registry this watcher keeps current.
    pub fn live(&self) -> Arc<LiveRegistry> {
        self.live.clone()
    }

    /// Looks at the folder once and reloads what changed.
    pub fn poll(&mut self) -> Reload {
        let now = scan(&self.dir);
        let mut reload = Reload::default();
        for (path, stamp) in &now {
            if self.stamps.get(path) == Some(stamp) {
                continue;
            }
            match Registry::load_file(path, &self.settings) {
                Ok(class) => {
                    tracing::info!(file = %path.display(), class = %class.name, "skill file reloaded");
                    self.good.insert(path.clone(), class);
                    reload.changed.push(path.clone());
                }
                Err(error) => {
                    let kept = self.good.contains_key(path);
                    tracing::warn!(%error, kept_previous = kept, "skill file failed to load");
                    reload.errors.push(error);
                }
            }
        }
        let removed: Vec<PathBuf> = self
            .good
            .keys()
            .filter(|p| !now.contains_key(*p))
            .cloned()
            .collect();
        for path in removed {
            tracing::info!(file = %path.display(), "skill file removed");
            self.good.remove(&path);
            reload.changed.push(path);
        }
        self.stamps = now;
        if !reload.changed.is_empty() {
            // BTreeMap order is file-name order: the same "first file wins" rule as a
            // fresh load when two files define one class.
            self.live.set_files(self.good.values().cloned().collect());
        }
        reload
    }

    /// Polls every [`POLL_INTERVAL`] until `stop` is cancelled, calling `on_change` after
    /// each reload that replaced the registry.
    pub async fn run(
        mut self,
        stop: tokio_util::sync::CancellationToken,
        on_change: impl Fn() + Send + 'static,
    ) {
        let mut tick = tokio::time::interval(POLL_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => return,
            }
            // Loading compiles Rhai: keep it off the async worker.
            let result = tokio::task::spawn_blocking(move || {
                let reload = self.poll();
                (self, reload)
            })
            .await;
            let Ok((watcher, reload)) = result else {
                tracing::error!("skill reload panicked; hot reload stopped");
                return;
            };
            self = watcher;
            if !reload.changed.is_empty() {
                on_change();
            }
        }
    }
}

/// The `.rhai` files of `dir` with their stamps; an unreadable folder is empty.
fn scan(dir: &Path) -> BTreeMap<PathBuf, Stamp> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rhai"))
        .filter_map(|p| {
            let meta = std::fs::metadata(&p).ok()?;
            meta.is_file().then(|| {
                (
                    p,
                    Stamp {
                        modified: meta.modified().ok(),
                        len: meta.len(),
                    },
                )
            })
        })
        .collect()
}
