//! Loading skill files: compile, check, and run them.
//!
//! Each file gets its own Rhai engine with the host API bound to that class (its
//! storage, its log lines). A file is accepted only when it compiles, its doc comments
//! match its functions, and every function it calls exists, so a typo is found when the
//! skill is loaded rather than when a user first asks for it.
//!
//! Decisions worth knowing when writing skills:
//! - Top-level statements are rejected: calls run a function directly (`call_fn`
//!   without evaluating the file), so code outside a function would never run. Rhai
//!   functions cannot see top-level variables or constants anyway.
//! - `eval` and `import` are not available: they would hide calls from the
//!   unknown-function check and make a skill depend on other files.
//! - The unknown-function check knows the file's own functions, everything registered
//!   in the engine (Rhai's standard library and the host API) and Rhai's special
//!   keywords (`print`, `debug`, `type_of`, `Fn`, `call`, `curry`, `is_shared`,
//!   `is_def_fn`, `is_def_var`). Calling a function pointer stored in a map property
//!   with method syntax (`obj.action()`) therefore fails the check; use
//!   `obj.action.call()`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rhai::{
    AST, ASTNode, CallFnOptions, Dynamic, Engine, EvalAltResult, Expr, Position, Scope, Stmt,
};

use super::doc::{self, DocError, FnLine};
use super::value::{dynamic_to_json, json_to_dynamic};
use super::{
    CallError, ClassDoc, LoadError, MAX_REQUEST_CHARS, MAX_REQUESTS, Param, SkillClass,
    SkillFunction, ValueType, similar_names,
};
use crate::deadline;
use crate::host::storage::Store;
use crate::host::{self, HostSettings, SkillContext};

/// Names Rhai handles itself; a skill function with one of them could not be reached
/// (or would silently change the language for the rest of the file).
const RESERVED: [(&str, &str); 11] = [
    ("call", "`x.call(...)` always calls a function pointer"),
    ("curry", "`x.curry(...)` always curries a function pointer"),
    ("print", "it is Rhai's output statement"),
    ("debug", "it is Rhai's debug output statement"),
    ("type_of", "it is a Rhai keyword"),
    ("Fn", "it makes function pointers"),
    ("eval", "it is a Rhai keyword"),
    ("is_shared", "it is a Rhai keyword"),
    ("is_def_fn", "it is a Rhai keyword"),
    ("is_def_var", "it is a Rhai keyword"),
    ("this", "it is a Rhai keyword"),
];

/// Rhai keywords that look like function calls but are not registered functions.
const KEYWORD_CALLS: [&str; 9] = [
    "print",
    "debug",
    "type_of",
    "Fn",
    "call",
    "curry",
    "is_shared",
    "is_def_fn",
    "is_def_var",
];

/// A loaded file's engine and compiled script.
pub(crate) struct Runtime {
    engine: Engine,
    ast: AST,
    file: PathBuf,
}

/// Builds the host context of one skill class.
///
/// The one place that knows how a skill's storage is made; fallible because opening
/// storage is, and its error becomes the file's load error.
fn skill_context(class: &str, settings: &HostSettings) -> Result<Arc<SkillContext>, String> {
    Ok(Arc::new(SkillContext {
        class: class.to_string(),
        settings: settings.clone(),
        store: Store::open(&settings.data_dir, class, settings.storage)
            .map_err(|e| e.to_string())?,
    }))
}

/// A skill engine: limits, the deadline check, output to the log, the host API.
fn skill_engine(class: &str, settings: &HostSettings) -> Result<Engine, String> {
    let mut engine = Engine::new();
    engine.set_module_resolver(rhai::module_resolvers::DummyModuleResolver::new());
    // The deadline, not an operation count, bounds a call; these bound memory and
    // recursion. Strings must hold a whole HTTP body or file.
    engine.set_max_call_levels(64);
    engine.set_max_string_size(
        settings
            .http_max_bytes
            .max(settings.file_max_bytes)
            .max(1 << 20),
    );
    engine.set_max_array_size(100_000);
    engine.set_max_map_size(100_000);
    engine.on_progress(|operations| {
        // Reading the clock on every operation would slow loops down for nothing.
        (operations % 256 == 0 && deadline::expired()).then_some(Dynamic::UNIT)
    });
    let print_class = class.to_string();
    engine.on_print(move |text| tracing::info!(skill = %print_class, "{text}"));
    let debug_class = class.to_string();
    engine.on_debug(move |text, _, pos| tracing::debug!(skill = %debug_class, %pos, "{text}"));
    host::register(&mut engine, skill_context(class, settings)?);
    Ok(engine)
}

/// Loads every `*.rhai` file in `dir`, in file-name order.
pub(crate) fn load_dir(dir: &Path, settings: &HostSettings) -> (Vec<SkillClass>, Vec<LoadError>) {
    let folder_error = |message: String| LoadError {
        file: dir.to_path_buf(),
        line: 0,
        column: 0,
        message,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return (
                Vec::new(),
                vec![folder_error(
                    "skills folder does not exist; create it or point `skills.dir` in the config at the right folder".to_string(),
                )],
            );
        }
        Err(e) => {
            return (
                Vec::new(),
                vec![folder_error(format!("cannot read the skills folder: {e}"))],
            );
        }
    };
    let mut files: Vec<PathBuf> = Vec::new();
    let mut errors = Vec::new();
    for entry in entries {
        match entry {
            Ok(entry) => {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "rhai") && path.is_file() {
                    files.push(path);
                }
            }
            Err(e) => errors.push(folder_error(format!("cannot list the skills folder: {e}"))),
        }
    }
    files.sort();
    let mut classes: Vec<SkillClass> = Vec::new();
    let mut first_file: HashMap<String, PathBuf> = HashMap::new();
    for path in files {
        match load(&path, settings) {
            Ok((class, (line, column))) => {
                if let Some(first) = first_file.get(&class.name) {
                    errors.push(LoadError {
                        file: path,
                        line,
                        column,
                        message: format!(
                            "class `{}` is already defined in {}; give this file another name or a `//! @class OtherName` line",
                            class.name,
                            first.display()
                        ),
                    });
                } else {
                    first_file.insert(class.name.clone(), path);
                    classes.push(class);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    (classes, errors)
}

/// Loads one file.
pub(crate) fn load_file(path: &Path, settings: &HostSettings) -> Result<SkillClass, LoadError> {
    load(path, settings).map(|(class, _)| class)
}

/// Turns a file stem into a class name: `system_info` -> `SystemInfoSkill`.
fn class_name_from_stem(stem: &str) -> Option<String> {
    let mut name: String = stem
        .split(['_', '-', ' ', '.'])
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|first| first.to_uppercase().chain(chars).collect::<String>())
                .unwrap_or_default()
        })
        .collect();
    if !name.ends_with("Skill") {
        name.push_str("Skill");
    }
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some(name)
}

/// Loads one file; also returns where its class name is declared (for duplicate errors).
fn load(path: &Path, settings: &HostSettings) -> Result<(SkillClass, (usize, usize)), LoadError> {
    let at = |line: usize, column: usize, message: String| LoadError {
        file: path.to_path_buf(),
        line,
        column,
        message,
    };
    let from_doc = |e: DocError| at(e.line, e.column, e.message);
    let text = std::fs::read_to_string(path)
        .map_err(|e| at(0, 0, format!("cannot read the file: {e}")))?;
    let scan = doc::scan(&text);

    for f in &scan.fns {
        if let Some((_, why)) = RESERVED.iter().find(|(name, _)| *name == f.name) {
            return Err(at(
                f.line,
                f.column,
                format!(
                    "function name `{}` is reserved: {why}; rename the function",
                    f.name
                ),
            ));
        }
    }
    // Syntax first: it is the most basic problem, and needs no class name.
    Engine::new_raw()
        .compile(&text)
        .map_err(|e| syntax_error(path, &e))?;

    let module = doc::parse_module(&scan.module).map_err(from_doc)?;
    let (class_name, class_pos) = match &module.class {
        Some((name, line, column)) => (name.clone(), (*line, *column)),
        None => {
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let name = class_name_from_stem(&stem).ok_or_else(|| {
                at(1, 1, format!("cannot make a class name from the file name `{stem}`; add a `//! @class Name` line"))
            })?;
            (name, (1, 1))
        }
    };

    let engine = skill_engine(&class_name, settings)
        .map_err(|e| at(0, 0, format!("cannot set up skill `{class_name}`: {e}")))?;
    let ast = engine.compile(&text).map_err(|e| syntax_error(path, &e))?;
    if let Some(stmt) = ast.statements().first() {
        let (line, column) = line_col(stmt.position());
        return Err(at(
            line,
            column,
            "code outside a function never runs (calls go straight to a function); move it into a function".to_string(),
        ));
    }
    check_calls(&engine, &ast).map_err(|(line, column, message)| at(line, column, message))?;

    let compiled: Vec<(&str, Vec<&str>)> =
        ast.iter_functions().map(|f| (f.name, f.params)).collect();
    let mut functions = Vec::new();
    let mut warnings = Vec::new();
    // Name -> line of the exported function already seen.
    let mut exported: HashMap<String, usize> = HashMap::new();
    for f in scan
        .fns
        .iter()
        .filter(|f| !f.private && !f.name.starts_with('_'))
    {
        // Rhai's parameter list is the truth (the scan sees one line); a `fn` line Rhai
        // did not compile (inside a multi-line string) is no function at all.
        let same_name = || compiled.iter().filter(|(name, _)| *name == f.name);
        let Some((_, params)) = same_name()
            .find(|(_, params)| params.len() == f.params.len())
            .or_else(|| same_name().next())
        else {
            continue;
        };
        let f = FnLine {
            params: params
                .iter()
                .map(|name| {
                    let column = f
                        .params
                        .iter()
                        .find(|(p, _)| p == name)
                        .map_or(f.column, |(_, c)| *c);
                    (name.to_string(), column)
                })
                .collect(),
            ..f.clone()
        };
        if let Some(first_line) = exported.get(&f.name) {
            return Err(at(
                f.line,
                f.column,
                format!(
                    "`{}` is already defined on line {}; a skill exports one function per name, so rename one or make it `private`",
                    f.name, first_line
                ),
            ));
        }
        let (function, notes) = function(&class_name, path, &f, module.remote).map_err(from_doc)?;
        warnings.extend(notes.into_iter().map(from_doc));
        functions.push(function);
        exported.insert(f.name, f.line);
    }
    // Every function Rhai compiled must be one the scan found, or its docs were missed.
    let scanned: HashSet<&str> = scan.fns.iter().map(|f| f.name.as_str()).collect();
    if let Some(missed) = ast
        .iter_functions()
        .find(|f| !scanned.contains(f.name) && !f.name.contains('$'))
    {
        return Err(at(
            1,
            1,
            format!(
                "function `{}` must start its own line with `fn` so its documentation can be read",
                missed.name
            ),
        ));
    }

    for warning in &warnings {
        tracing::warn!(%warning, "skill file loaded with a warning");
    }
    let class = SkillClass {
        doc: ClassDoc {
            name: class_name,
            summary: module.summary,
            description: module.description,
            examples: module.examples,
            functions,
        },
        file: path.to_path_buf(),
        warnings,
        runtime: Arc::new(Runtime {
            engine,
            ast,
            file: path.to_path_buf(),
        }),
    };
    Ok((class, class_pos))
}

fn line_col(pos: Position) -> (usize, usize) {
    (pos.line().unwrap_or(1), pos.position().unwrap_or(1))
}

fn syntax_error(path: &Path, e: &rhai::ParseError) -> LoadError {
    let (line, column) = line_col(e.position());
    let message = match e.err_type() {
        rhai::ParseErrorType::Reserved(word) => {
            format!("`{word}` is a reserved word in Rhai; use another name")
        }
        other => format!("syntax error: {other}"),
    };
    LoadError {
        file: path.to_path_buf(),
        line,
        column,
        message,
    }
}

/// Builds an exported function from its `fn` line and `///` block; `class_remote` is the
/// class's `//! @remote`. Also returns what loads but deserves the author's attention: a
/// parameter without a `@param` line takes any value (a newcomer's first skill written
/// by analogy should load; the summary is what the model cannot do without).
fn function(
    class: &str,
    path: &Path,
    f: &FnLine,
    class_remote: bool,
) -> Result<(SkillFunction, Vec<DocError>), DocError> {
    let fail = |line: usize, column: usize, message: String| DocError {
        line,
        column,
        message,
    };
    let doc = doc::parse_fn(&f.doc)?;
    if doc.remote && doc.no_model {
        let (line, column) = doc.remote_at;
        return Err(fail(
            line,
            column,
            format!(
                "`{}` is marked both `@remote` and `@no_model`; other devices call through \
                 their model code, so drop one of them",
                f.name
            ),
        ));
    }
    if doc.summary.is_empty() {
        return Err(fail(
            f.line,
            f.column,
            format!(
                "function `{}` has no summary; add a `/// One-line summary.` line above it",
                f.name
            ),
        ));
    }
    let fn_params: Vec<&str> = f.params.iter().map(|(name, _)| name.as_str()).collect();
    let shown = format!("fn {}({})", f.name, fn_params.join(", "));
    let mut seen = HashSet::new();
    let mut last_at = None;
    for p in &doc.params {
        if !seen.insert(p.name.as_str()) {
            return Err(fail(
                p.line,
                p.column,
                format!("`@param {}` appears twice", p.name),
            ));
        }
        match fn_params.iter().position(|name| *name == p.name) {
            None => {
                let hint = match similar_names(&p.name, fn_params.iter().copied()).first() {
                    Some(best) => format!("did you mean `{best}`?"),
                    None => format!("the parameters are `{shown}`"),
                };
                return Err(fail(
                    p.line,
                    p.column,
                    format!(
                        "`@param {}` names no parameter of `{}`; {hint}",
                        p.name, f.name
                    ),
                ));
            }
            Some(at) if last_at.is_some_and(|last| at < last) => {
                return Err(fail(
                    p.line,
                    p.column,
                    format!(
                        "`@param {}` is out of order; document the parameters in the order of `{shown}`",
                        p.name
                    ),
                ));
            }
            Some(at) => last_at = Some(at),
        }
    }
    let mut warnings = Vec::new();
    let mut documented = doc.params.into_iter().peekable();
    let mut params = Vec::with_capacity(f.params.len());
    // Each parameter in the `fn` line's order, with its `@param` line or as `any`.
    for (name, column) in &f.params {
        match documented.next_if(|p| &p.name == name) {
            Some(p) => params.push(p),
            None => {
                warnings.push(fail(
                    f.line,
                    *column,
                    format!(
                        "parameter `{name}` of `{}` has no `@param` line, so it takes any value \
                         and the model is told nothing about it; add \
                         `/// @param {name}: <type>  <description>`",
                        f.name
                    ),
                ));
                params.push(doc::ParamDoc {
                    name: name.clone(),
                    ty: ValueType::Any,
                    default: None,
                    description: String::new(),
                    line: f.line,
                    column: *column,
                });
            }
        }
    }
    if let Some(with_default) = params.iter().position(|p| p.default.is_some())
        && let Some(p) = params[with_default..].iter().find(|p| p.default.is_none())
    {
        let before = &params[with_default].name;
        return Err(fail(
            p.line,
            p.column,
            format!(
                "parameter `{}` has no default but follows `{before}`, which has one; give it a default or move it before `{before}`",
                p.name
            ),
        ));
    }
    let mut requests = Vec::new();
    for (request, line, column) in doc.requests {
        if request.chars().count() > MAX_REQUEST_CHARS {
            warnings.push(fail(
                line,
                column,
                format!(
                    "`@request` of `{}` is over {MAX_REQUEST_CHARS} characters, so search ignores it; write one short sentence a person would say",
                    f.name
                ),
            ));
        } else if requests.len() == MAX_REQUESTS {
            warnings.push(fail(
                line,
                column,
                format!(
                    "`{}` has more than {MAX_REQUESTS} `@request` lines; search uses the first {MAX_REQUESTS}, keep the most different ones",
                    f.name
                ),
            ));
        } else {
            requests.push(request);
        }
    }
    let function = SkillFunction {
        class: class.to_string(),
        name: f.name.clone(),
        params: params
            .into_iter()
            .map(|p| Param {
                name: p.name,
                ty: p.ty,
                default: p.default,
                description: p.description,
            })
            .collect(),
        returns: doc.returns.unwrap_or(ValueType::Unit),
        returns_doc: doc.returns_doc,
        summary: doc.summary,
        docstring: doc.docstring,
        requests,
        confirm: doc.confirm,
        model_callable: !doc.no_model,
        // A class-wide mark does not extend to functions that ask first: opening one of
        // those to other rooms is a decision for that function's own `@remote`.
        remote: doc.remote || (class_remote && !doc.confirm && !doc.no_model),
        file: path.to_path_buf(),
        line: f.line,
    };
    Ok((function, warnings))
}

/// Checks that every function the script calls exists; the first unknown one (by
/// position) is the error.
fn check_calls(engine: &Engine, ast: &AST) -> Result<(), (usize, usize, String)> {
    // Sorted, so that equally close suggestions come out the same on every run.
    let mut known: BTreeSet<String> = engine
        .gen_fn_signatures(true)
        .iter()
        .filter_map(|s| s.split('(').next())
        .map(str::to_string)
        .collect();
    known.extend(ast.iter_functions().map(|f| f.name.to_string()));
    known.extend(KEYWORD_CALLS.iter().map(|k| k.to_string()));

    let mut unknown: Vec<(usize, usize, String)> = Vec::new();
    let mut check = |name: String, pos: Position, method: bool| {
        let plain = name
            .chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_');
        if !plain || known.contains(&name) {
            return;
        }
        let (line, column) = line_col(pos);
        if name == "eval" {
            let message = "`eval` is not available in skills (it would hide calls from this check); call functions directly".to_string();
            unknown.push((line, column, message));
            return;
        }
        let bare = name.rsplit("::").next().unwrap_or(&name);
        let callable = known
            .iter()
            .map(String::as_str)
            .filter(|k| k.starts_with(|c: char| c.is_alphabetic() || c == '_'));
        let hint = match similar_names(bare, callable).first() {
            Some(best) => format!("did you mean `{best}`?"),
            None if name.contains("::") => "skills cannot import modules".to_string(),
            None => "define it in this file or use a host API function (see skills/README.md)"
                .to_string(),
        };
        let how = if method { " (called as a method)" } else { "" };
        unknown.push((
            line,
            column,
            format!("unknown function `{name}`{how}; {hint}"),
        ));
    };
    ast.walk(&mut |path: &[ASTNode]| {
        match path.last() {
            Some(ASTNode::Expr(Expr::FnCall(call, pos)))
            | Some(ASTNode::Stmt(Stmt::FnCall(call, pos)))
                if call.op_token.is_none() =>
            {
                let name = if call.namespace.is_empty() {
                    call.name.to_string()
                } else {
                    format!("{}::{}", call.namespace, call.name)
                };
                // `Fn("name")` names a function too; check it like a call.
                if call.name == "Fn"
                    && let [Expr::StringConstant(target, target_pos)] = call.args.as_slice()
                {
                    check(target.to_string(), *target_pos, false);
                }
                check(name, *pos, false);
            }
            // The parser turns `Fn("name")` with a literal name into a constant.
            Some(ASTNode::Expr(Expr::DynamicConstant(value, pos))) if value.is_fnptr() => {
                if let Some(name) = value
                    .read_lock::<rhai::FnPtr>()
                    .map(|f| f.fn_name().to_string())
                {
                    check(name, *pos, false);
                }
            }
            Some(ASTNode::Expr(Expr::MethodCall(call, pos))) => {
                check(call.name.to_string(), *pos, true)
            }
            _ => {}
        }
        true
    });
    unknown.sort();
    match unknown.into_iter().next() {
        Some(first) => Err(first),
        None => Ok(()),
    }
}

impl super::ClassRuntime for Runtime {
    /// Runs `f` with already bound arguments, stopping it at `timeout`.
    fn call(
        &self,
        f: &SkillFunction,
        args: Vec<serde_json::Value>,
        timeout: Duration,
    ) -> Result<serde_json::Value, CallError> {
        let args: Vec<Dynamic> = args.iter().map(json_to_dynamic).collect();
        let started = Instant::now();
        let result = deadline::with_deadline(started + timeout, || {
            let options = CallFnOptions::new().eval_ast(false).rewind_scope(true);
            self.engine.call_fn_with_options::<Dynamic>(
                options,
                &mut Scope::new(),
                &self.ast,
                &f.name,
                args,
            )
        });
        match result {
            Ok(value) => {
                let json = dynamic_to_json(&value).map_err(|what| CallError::Failed {
                    message: format!(
                        "{}:{}: {} returned {what}, which cannot be sent as JSON; return numbers, strings, bools, arrays, maps or ()",
                        self.file.display(),
                        f.line,
                        f.qualified_name()
                    ),
                })?;
                // The value is passed on as it is; a mismatch means the docs lie to the
                // model, which the skill's author should hear about.
                let widened = f.returns == ValueType::Float && json.is_i64();
                if !f.returns.accepts(&json) && !widened {
                    tracing::warn!(
                        function = %f.qualified_name(),
                        file = %self.file.display(),
                        line = f.line,
                        "returned {} but its doc comment says `@return {}`",
                        super::args::describe(&json),
                        f.returns
                    );
                }
                Ok(json)
            }
            Err(e)
                if matches!(e.unwrap_inner(), EvalAltResult::ErrorTerminated(..))
                    || started.elapsed() >= timeout =>
            {
                Err(CallError::Timeout {
                    function: f.qualified_name(),
                    after: timeout,
                })
            }
            Err(e) => Err(CallError::Failed {
                message: self.describe(&e),
            }),
        }
    }
}

impl Runtime {
    /// `file:line:col: message` for an error from skill code, at the innermost position.
    fn describe(&self, error: &EvalAltResult) -> String {
        let mut pos = error.position();
        let mut inner = error;
        while let EvalAltResult::ErrorInFunctionCall(_, _, next, _) = inner {
            if !next.position().is_none() {
                pos = next.position();
            }
            inner = next;
        }
        let message = match inner {
            EvalAltResult::ErrorRuntime(value, _) => format!("skill threw: {value}"),
            other => {
                // Display appends " (line L, position C)"; the position leads instead.
                let text = other.to_string();
                let suffix = format!(" ({})", other.position());
                match text.strip_suffix(&suffix) {
                    Some(bare) => bare.to_string(),
                    None => text,
                }
            }
        };
        let (line, column) = line_col(pos);
        format!("{}:{line}:{column}: {message}", self.file.display())
    }
}
