//! Skills: `.rhai` files a hobbyist drops into a folder (docs/architecture.md, "Skill files").
//!
//! The registry is the one place that knows which skill functions exist, what their
//! documented signatures are, and how to run them. Doc comments are the contract with
//! the model, so they are parsed strictly: a file whose documentation does not match its
//! code is reported with `file:line:col` and skipped, rather than half-loaded with a
//! signature that lies. Everything else (the `device` object, the CLI, MQTT registration)
//! is built on the types here.

pub mod args;
mod doc;
mod loader;
pub mod policy;
pub mod search;
mod value;
pub mod watch;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::host::HostSettings;
use crate::text::edit_distance;

pub use args::{ArgError, bind};
pub(crate) use doc::fn_line;
pub use search::SearchHit;

/// The declared type of a parameter or a return value in a skill's doc comments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// `int`: a whole number.
    Int,
    /// `float`: a number; an int is accepted.
    Float,
    /// `bool`.
    Bool,
    /// `string`.
    String,
    /// `array`.
    Array,
    /// `map`: an object with string keys.
    Map,
    /// `any`: everything is accepted.
    Any,
    /// `()`: nothing (only as a return type).
    Unit,
}

impl ValueType {
    /// The type names a doc comment may use for parameters (returns may also use `()`).
    pub const PARAM_NAMES: &'static str = "int, float, bool, string, array, map, any";

    /// Parses a type name as written in a doc comment.
    pub fn parse(name: &str) -> Option<ValueType> {
        Some(match name {
            "int" => ValueType::Int,
            "float" => ValueType::Float,
            "bool" => ValueType::Bool,
            "string" => ValueType::String,
            "array" => ValueType::Array,
            "map" => ValueType::Map,
            "any" => ValueType::Any,
            "()" => ValueType::Unit,
            _ => return None,
        })
    }

    /// Whether a JSON value is acceptable where this type is declared.
    pub fn accepts(self, value: &serde_json::Value) -> bool {
        use serde_json::Value as J;
        match self {
            ValueType::Int => value.is_i64(),
            ValueType::Float => value.is_number(),
            ValueType::Bool => value.is_boolean(),
            ValueType::String => value.is_string(),
            ValueType::Array => value.is_array(),
            ValueType::Map => value.is_object(),
            ValueType::Any => true,
            ValueType::Unit => matches!(value, J::Null),
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ValueType::Int => "int",
            ValueType::Float => "float",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::Map => "map",
            ValueType::Any => "any",
            ValueType::Unit => "()",
        })
    }
}

/// One documented parameter of a skill function.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// The parameter's name in the `fn` line.
    pub name: String,
    /// Its declared type.
    pub ty: ValueType,
    /// The default used when the caller omits it; `Some(Null)` for a `()` default.
    pub default: Option<serde_json::Value>,
    /// The description from its `@param` line.
    pub description: String,
}

/// `@request` lines kept per function: enough ways of asking to cover a function's
/// synonyms, few enough that embedding them all stays cheap (each costs one embedding
/// per version of its text, for local skills and peers' alike).
pub const MAX_REQUESTS: usize = 16;
/// Characters of one `@request` line; a spoken request is a sentence.
pub const MAX_REQUEST_CHARS: usize = 200;

/// One exported function of a skill class, as its doc comments describe it.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillFunction {
    /// The class it belongs to, e.g. `VolumeSkill`.
    pub class: String,
    /// The function's name, e.g. `set_volume`.
    pub name: String,
    /// Its parameters, in order.
    pub params: Vec<Param>,
    /// The declared return type (`()` when no `@return`).
    pub returns: ValueType,
    /// The description from the `@return` line.
    pub returns_doc: String,
    /// The one-line summary (first doc line).
    pub summary: String,
    /// The rest of the prose, possibly empty.
    pub docstring: String,
    /// `@request` lines: ways people ask for it ("put the telly on"), which search
    /// matches a spoken request against; at most [`MAX_REQUESTS`].
    pub requests: Vec<String>,
    /// `@confirm`: the user must confirm before it runs.
    pub confirm: bool,
    /// `false` when marked `@no_model`: only a person (CLI) may call it.
    pub model_callable: bool,
    /// `@remote` (or the class's `//! @remote`): other devices may call it without
    /// `mqtt.remote_allow` naming it.
    pub remote: bool,
    /// The file that defines it.
    pub file: PathBuf,
    /// The 1-based line of its `fn`.
    pub line: usize,
}

impl SkillFunction {
    /// The typed signature shown to the model, e.g.
    /// `set_volume(level: int, step: int = 5) -> ()`.
    pub fn signature(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|p| match &p.default {
                Some(default) => format!("{}: {} = {}", p.name, p.ty, render_literal(default)),
                None => format!("{}: {}", p.name, p.ty),
            })
            .collect();
        format!("{}({}) -> {}", self.name, params.join(", "), self.returns)
    }

    /// `Class.function`, e.g. `VolumeSkill.set_volume`.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.class, self.name)
    }
}

/// Renders a JSON value the way a Rhai literal is written (`#{}` maps, `()` for null).
fn render_literal(value: &serde_json::Value) -> String {
    use serde_json::Value as J;
    match value {
        J::Null => "()".to_string(),
        J::Array(items) => {
            let items: Vec<String> = items.iter().map(render_literal).collect();
            format!("[{}]", items.join(", "))
        }
        J::Object(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", render_key(k), render_literal(v)))
                .collect();
            format!("#{{{}}}", items.join(", "))
        }
        J::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or_default();
            if f.fract() == 0.0 && f.abs() < 1e15 {
                format!("{f:.1}")
            } else {
                f.to_string()
            }
        }
        other => other.to_string(),
    }
}

fn render_key(key: &str) -> String {
    let plain = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        key.to_string()
    } else {
        serde_json::Value::String(key.to_string()).to_string()
    }
}

/// An example request and the device code that serves it (few-shot material).
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// What a user might say.
    pub request: String,
    /// Model-side code that serves it.
    pub code: String,
}

/// What a skill class says about itself: the documentation the model, the search and
/// other spokes read. A local `.rhai` file and a peer's registration both produce one,
/// so everything that only reads documentation (the prompt, the search, `device` help)
/// treats this room's skills and other rooms' alike.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassDoc {
    /// The class name, e.g. `TimerSkill`.
    pub name: String,
    /// The first paragraph of the `//!` comments.
    pub summary: String,
    /// The following `//!` paragraphs, possibly empty.
    pub description: String,
    /// `@example` blocks.
    pub examples: Vec<Example>,
    /// Exported functions, in file order.
    pub functions: Vec<SkillFunction>,
}

impl ClassDoc {
    /// The exported function called `name`.
    pub fn function(&self, name: &str) -> Option<&SkillFunction> {
        self.functions.iter().find(|f| f.name == name)
    }
}

impl AsRef<ClassDoc> for ClassDoc {
    fn as_ref(&self) -> &ClassDoc {
        self
    }
}

/// What runs a class's functions: a skill file's Rhai engine, or something outside the
/// process that documents itself as a class (an MCP server, [`crate::mcp`]).
///
/// Called on the thread of the sandbox run (or CLI) that asked, inside its
/// [`deadline`] budget: an implementation that waits must wait in slices of
/// [`deadline::SLICE`] and give up once [`deadline::expired`].
pub trait ClassRuntime: Send + Sync {
    /// Runs `f` with arguments already bound to its signature ([`args::bind`]),
    /// stopping it at `timeout` (`skills.call_timeout_ms`, which the runtime may
    /// replace with its own).
    fn call(
        &self,
        f: &SkillFunction,
        args: Vec<serde_json::Value>,
        timeout: Duration,
    ) -> Result<serde_json::Value, CallError>;
}

/// One loaded skill class: its documentation and what runs it.
///
/// Cheap to clone: the compiled script and its engine are shared. It reads as its
/// [`ClassDoc`] (`class.name`, `class.functions`), since most code only needs that.
#[derive(Clone)]
pub struct SkillClass {
    /// What the file documents.
    pub doc: ClassDoc,
    /// The file it was loaded from (for a class from outside, the file that configures it).
    pub file: PathBuf,
    /// What loaded but deserves the author's attention (`skills check` prints them).
    pub warnings: Vec<LoadError>,
    runtime: Arc<dyn ClassRuntime>,
}

impl SkillClass {
    /// A class whose functions `runtime` runs rather than a skill file's engine, with
    /// `doc` as what the model, the search and other spokes read about it.
    pub fn external(doc: ClassDoc, file: PathBuf, runtime: Arc<dyn ClassRuntime>) -> SkillClass {
        SkillClass {
            doc,
            file,
            warnings: Vec::new(),
            runtime,
        }
    }
}

impl fmt::Debug for SkillClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SkillClass")
            .field("doc", &self.doc)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl std::ops::Deref for SkillClass {
    type Target = ClassDoc;

    fn deref(&self) -> &ClassDoc {
        &self.doc
    }
}

impl AsRef<ClassDoc> for SkillClass {
    fn as_ref(&self) -> &ClassDoc {
        &self.doc
    }
}

/// A skill file that could not be loaded, with the position of the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct LoadError {
    /// The file (or folder) at fault.
    pub file: PathBuf,
    /// 1-based line; 0 when the problem is the whole file or folder.
    pub line: usize,
    /// 1-based column; 0 when unknown.
    pub column: usize,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file.display(),
                self.line,
                self.column,
                self.message
            )
        }
    }
}

/// A function name that does not resolve to exactly one skill function.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// Nothing has that name.
    #[error("no skill function `{name}`{}", did_you_mean(suggestions))]
    NotFound {
        /// The name asked for.
        name: String,
        /// Close qualified names, best first.
        suggestions: Vec<String>,
    },
    /// A bare function name that several classes export.
    #[error("`{name}` is ambiguous; use one of {}", quoted_list(candidates))]
    Ambiguous {
        /// The name asked for.
        name: String,
        /// Every `Class.fn` it could mean.
        candidates: Vec<String>,
    },
}

/// Why a skill call did not return a value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// No loaded class has that name.
    #[error("no skill class `{class}`{}", did_you_mean(suggestions))]
    UnknownClass {
        /// The class asked for.
        class: String,
        /// Close class names, best first.
        suggestions: Vec<String>,
    },
    /// The class exports no function with that name.
    #[error(
        "{class} has no function `{function}` (it has {}){}",
        quoted_list(available),
        did_you_mean(suggestions)
    )]
    UnknownFunction {
        /// The class.
        class: String,
        /// The function asked for.
        function: String,
        /// Close function names, best first.
        suggestions: Vec<String>,
        /// Every function the class exports.
        available: Vec<String>,
    },
    /// The arguments do not match the documented signature; the skill did not run.
    #[error(transparent)]
    Arguments(#[from] ArgError),
    /// The call ran out of time (settings.call_timeout) and was stopped.
    #[error("{function} did not finish within {after:?} and was stopped")]
    Timeout {
        /// `Class.fn`.
        function: String,
        /// The timeout that expired.
        after: Duration,
    },
    /// The skill threw or hit a runtime error; the message starts with `file:line:col`.
    #[error("{message}")]
    Failed {
        /// What went wrong, with its position in the skill file.
        message: String,
    },
}

fn did_you_mean(suggestions: &[String]) -> String {
    match suggestions {
        [] => String::new(),
        [one] => format!("; did you mean `{one}`?"),
        many => format!("; did you mean one of {}?", quoted_list(many)),
    }
}

fn quoted_list(items: &[String]) -> String {
    if items.is_empty() {
        return "none".to_string();
    }
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The candidates close enough to `wanted` to be a likely typo, closest first
/// (at most three; ties in candidate order).
pub(crate) fn similar_names<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    let limit = (wanted.chars().count() / 3).clamp(1, 3);
    let mut close: Vec<(usize, &str)> = candidates
        .into_iter()
        .map(|c| (edit_distance(wanted, c), c))
        .filter(|(d, _)| *d <= limit)
        .collect();
    close.sort_by_key(|(d, _)| *d);
    close.dedup_by(|a, b| a.1 == b.1);
    close
        .into_iter()
        .take(3)
        .map(|(_, c)| c.to_string())
        .collect()
}

/// All loaded skill classes, searchable and callable.
pub struct Registry {
    classes: Vec<SkillClass>,
    settings: HostSettings,
    index: search::ClassIndex,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("classes", &self.classes)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// Loads every `*.rhai` file in `dir` (not recursive, in file-name order).
    ///
    /// Broken files are reported and skipped; the others load. A class defined twice
    /// keeps the file that comes first by name. A missing folder is one error and an
    /// empty registry.
    pub fn load(dir: &Path, settings: &HostSettings) -> (Registry, Vec<LoadError>) {
        let (classes, errors) = loader::load_dir(dir, settings);
        (Registry::new(classes, settings.clone()), errors)
    }

    /// Loads one skill file on its own (no duplicate check against other files).
    pub fn load_file(path: &Path, settings: &HostSettings) -> Result<SkillClass, LoadError> {
        loader::load_file(path, settings)
    }

    /// A registry of already loaded classes, e.g. after reloading one file. When two
    /// classes share a name, the first one is kept.
    pub fn new(mut classes: Vec<SkillClass>, settings: HostSettings) -> Registry {
        let mut seen = std::collections::HashSet::new();
        classes.retain(|c| seen.insert(c.name.clone()));
        classes.sort_by(|a, b| a.name.cmp(&b.name));
        let index = search::ClassIndex::build_with(&classes, settings.search.semantic());
        Registry {
            classes,
            settings,
            index,
        }
    }

    /// The search index of [`Registry::classes`], built when the registry was.
    pub fn index(&self) -> &search::ClassIndex {
        &self.index
    }

    /// The loaded classes, sorted by name.
    pub fn classes(&self) -> &[SkillClass] {
        &self.classes
    }

    /// The class called `name`.
    pub fn class(&self, name: &str) -> Option<&SkillClass> {
        self.classes
            .binary_search_by(|c| c.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.classes[i])
    }

    /// The host settings the registry runs skills with.
    pub fn settings(&self) -> &HostSettings {
        &self.settings
    }

    fn all_functions(&self) -> impl Iterator<Item = &SkillFunction> {
        self.classes.iter().flat_map(|c| c.functions.iter())
    }

    /// Resolves `"Class.fn"` or a bare `"fn"` that exactly one class exports.
    pub fn function(&self, name: &str) -> Result<&SkillFunction, LookupError> {
        let found: Vec<&SkillFunction> = match name.split_once('.') {
            Some((class, function)) => self
                .class(class)
                .and_then(|c| c.function(function))
                .into_iter()
                .collect(),
            None => self.all_functions().filter(|f| f.name == name).collect(),
        };
        match found.as_slice() {
            [one] => Ok(one),
            [] => {
                let qualified: Vec<String> = self
                    .all_functions()
                    .map(SkillFunction::qualified_name)
                    .collect();
                let mut suggestions = similar_names(name, qualified.iter().map(String::as_str));
                if suggestions.is_empty() {
                    // A bare name close to some function's own name.
                    let bare = name.rsplit('.').next().unwrap_or(name);
                    suggestions = self
                        .all_functions()
                        .filter(|f| edit_distance(bare, &f.name) <= (bare.len() / 3).clamp(1, 3))
                        .map(SkillFunction::qualified_name)
                        .take(3)
                        .collect();
                }
                Err(LookupError::NotFound {
                    name: name.to_string(),
                    suggestions,
                })
            }
            many => Err(LookupError::Ambiguous {
                name: name.to_string(),
                candidates: many.iter().map(|f| f.qualified_name()).collect(),
            }),
        }
    }

    /// Functions ranked by relevance to `query`, best first, at most `limit`.
    ///
    /// An empty query (or one with no searchable words) lists every function by
    /// qualified name. Nothing is filtered out here: callers apply policy such as
    /// `@no_model` (`SkillFunction::model_callable`) themselves.
    pub fn search(&self, query: &str, limit: usize) -> Vec<SearchHit<'_>> {
        self.index.search(&self.classes, query, limit)
    }

    /// Calls `class.function` with positional arguments, or named ones as a single JSON
    /// object (see [`args::bind`]), within `settings.call_timeout`.
    ///
    /// Policy is the caller's: this runs `@no_model` and `@confirm` functions like any
    /// other. Blocks the calling thread for as long as the skill runs.
    pub fn call(
        &self,
        class: &str,
        function: &str,
        args: &[serde_json::Value],
    ) -> Result<serde_json::Value, CallError> {
        let Some(skill) = self.class(class) else {
            return Err(CallError::UnknownClass {
                class: class.to_string(),
                suggestions: similar_names(class, self.classes.iter().map(|c| c.name.as_str())),
            });
        };
        let Some(f) = skill.function(function) else {
            let names = skill.functions.iter().map(|f| f.name.as_str());
            return Err(CallError::UnknownFunction {
                class: class.to_string(),
                function: function.to_string(),
                suggestions: similar_names(function, names.clone()),
                available: names.map(str::to_string).collect(),
            });
        };
        let bound = args::bind(f, args)?;
        skill.runtime.call(f, bound, self.settings.call_timeout)
    }
}
