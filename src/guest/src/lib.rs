//! The Rhai interpreter that runs model-written code inside the spoke's wasmtime
//! sandbox (docs/architecture.md, "The sandbox").
//!
//! It is built for `wasm32-unknown-unknown` (no WASI: the module imports nothing but
//! the device bridge), pre-initialised by wizer at build time so that every instance
//! starts with a ready Rhai [`Engine`] in its memory, and instantiated afresh for every
//! run so nothing leaks from one run to the next.
//!
//! # Protocol with the host
//!
//! All pointers and lengths are `u32` offsets into this module's memory; a "packed"
//! answer is a `u64` holding `(pointer << 32) | length`.
//!
//! Exports:
//! - `init()`: builds the engine. Wizer calls it at build time; the snapshot does not
//!   export it any more.
//! - `alloc(len) -> ptr`: reserves `len` bytes the host may fill. Ownership passes to
//!   whoever the pointer is handed to next (`run` for the code, the bridge caller for
//!   an answer).
//! - `run(code_ptr, code_len, max_operations, max_string_size, max_array_size,
//!   max_map_size, max_call_depth, max_expr_depth, output_bytes) -> packed`: runs the
//!   UTF-8 code written at `code_ptr` (obtained from `alloc`) and returns the result as
//!   JSON: `{"kind":"ok","output","value"}`, `{"kind":"syntax","output","message",
//!   "line","column"}`, `{"kind":"runtime",...same}` or `{"kind":"limit","output",
//!   "limit","message"}` where `limit` is one of `operations`, `output`, `data_size`,
//!   `depth`. A limit of 0 means "no limit", as in Rhai.
//! - `output() -> packed`: what the script printed so far; the host reads it after a
//!   trap (time or memory limit) ended `run` early. Returns 0 if it is unavailable.
//!
//! Import `spoke.call(req_ptr, req_len) -> packed`: the request is a JSON
//! `DeviceRequest` (`{"op":"call","device":null,"class":..,"function":..,"args":[..]}`,
//! `{"op":"search_skills","query":..}`, `{"op":"get_skill_info","class":..}`,
//! `{"op":"get_function_info","name":..}`). The host answers `{"ok":true,"value":..}`
//! or `{"ok":false,"error":".."}`, writing it into a buffer it obtains by calling
//! `alloc`, and returns that buffer packed; the guest takes ownership of it.

use std::any::TypeId;
use std::cell::RefCell;
use std::collections::BTreeSet;

use rhai::{
    ASTNode, Dynamic, Engine, EvalAltResult, Expr, ImmutableString, NativeCallContext,
    ParseErrorType, Position,
};
use serde::{Deserialize, Serialize};

#[link(wasm_import_module = "spoke")]
unsafe extern "C" {
    /// The device bridge; see the module documentation.
    #[link_name = "call"]
    fn spoke_call(request_ptr: *const u8, request_len: usize) -> u64;
}

thread_local! {
    /// The engine built by `init`; it lives in the wizer snapshot.
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
    /// `print`/`debug` output of the current run.
    static OUTPUT: RefCell<Output> = const { RefCell::new(Output { text: String::new(), cap: 0, exceeded: false }) };
}

/// Output buffer capped at the run's output limit.
struct Output {
    text: String,
    cap: usize,
    exceeded: bool,
}

impl Output {
    fn push_line(&mut self, line: &str) {
        if self.exceeded {
            return;
        }
        let room = self.cap.saturating_sub(self.text.len());
        if line.len() < room {
            self.text.push_str(line);
            self.text.push('\n');
        } else {
            let mut cut = room.min(line.len());
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            self.text.push_str(&line[..cut]);
            self.exceeded = true;
        }
    }
}

/// `device`: the current device, or a named one from `devices["name"]`.
#[derive(Clone)]
struct Device {
    name: Option<ImmutableString>,
}

/// `devices`: indexing it by name gives that device.
#[derive(Clone)]
struct Devices;

/// `device.Class`: calling any method on it calls that skill function.
#[derive(Clone)]
struct SkillClass {
    device: Option<ImmutableString>,
    class: ImmutableString,
}

/// What crosses the bridge (mirrors `DeviceRequest` in the host's `src/sandbox`).
#[derive(Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request<'a> {
    SearchSkills {
        query: &'a str,
    },
    GetSkillInfo {
        class: &'a str,
    },
    GetFunctionInfo {
        name: &'a str,
    },
    Call {
        device: Option<&'a str>,
        class: &'a str,
        function: &'a str,
        args: Vec<serde_json::Value>,
    },
}

/// The host's answer to a [`Request`].
#[derive(Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default)]
    value: serde_json::Value,
    #[serde(default)]
    error: String,
}

/// The result of a run, as JSON for the host.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum RunResult<'a> {
    Ok {
        output: &'a str,
        value: serde_json::Value,
    },
    Syntax {
        output: &'a str,
        message: String,
        line: usize,
        column: usize,
    },
    Runtime {
        output: &'a str,
        message: String,
        line: usize,
        column: usize,
    },
    Limit {
        output: &'a str,
        limit: &'static str,
        message: String,
    },
}

/// Sends one request over the bridge; a host error becomes a Rhai runtime error the
/// script can catch.
fn bridge(request: &Request<'_>) -> Result<Dynamic, Box<EvalAltResult>> {
    let bytes = serde_json::to_vec(request)
        .map_err(|e| format!("cannot encode the device request: {e}"))?;
    // SAFETY: the host reads `bytes` during the call and answers with a buffer it got
    // from `alloc`, whose ownership passes to us.
    let packed = unsafe { spoke_call(bytes.as_ptr(), bytes.len()) };
    let answer = unsafe { take_buffer(packed) };
    let answer: Answer = serde_json::from_slice(&answer)
        .map_err(|e| format!("the host sent an unreadable answer: {e}"))?;
    if answer.ok {
        rhai::serde::to_dynamic(answer.value)
    } else {
        Err(answer.error.into())
    }
}

/// Takes back a buffer handed out by [`alloc`].
///
/// # Safety
/// `packed` must describe a buffer returned by `alloc` that nobody else owns.
unsafe fn take_buffer(packed: u64) -> Box<[u8]> {
    let ptr = (packed >> 32) as usize as *mut u8;
    let len = (packed & 0xffff_ffff) as usize;
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) }
}

/// Packs a buffer's address and length for the host; see the module documentation.
fn pack(bytes: &[u8]) -> u64 {
    ((bytes.as_ptr() as usize as u64) << 32) | bytes.len() as u64
}

fn to_json(value: &Dynamic) -> Result<serde_json::Value, Box<EvalAltResult>> {
    serde_json::to_value(value).map_err(|e| {
        format!(
            "a value of type {} cannot be sent to a skill: {e}",
            value.type_name()
        )
        .into()
    })
}

fn build_engine() -> Engine {
    let mut engine = Engine::new();
    // The script reaches nothing but `device`: no eval (it would bypass the checks
    // the host makes on the code), no modules (compiled out), no I/O.
    engine.disable_symbol("eval");

    engine.register_type_with_name::<Device>("Device");
    engine.register_type_with_name::<Devices>("Devices");
    engine.register_type_with_name::<SkillClass>("SkillClass");

    engine.on_print(|text| OUTPUT.with_borrow_mut(|o| o.push_line(text)));
    engine.on_debug(|text, _, _| OUTPUT.with_borrow_mut(|o| o.push_line(text)));
    // `print` cannot fail, so an overflowing output ends the run at the next step.
    engine.on_progress(|_| {
        OUTPUT
            .with_borrow(|o| o.exceeded)
            .then(|| Dynamic::from("output"))
    });

    // `device` and `devices` resolve everywhere, including inside script functions,
    // which cannot see the global scope.
    #[allow(deprecated)]
    engine.on_var(|name, _, _| {
        Ok(match name {
            "device" => Some(Dynamic::from(Device { name: None })),
            "devices" => Some(Dynamic::from(Devices)),
            _ => None,
        })
    });

    engine.register_indexer_get(|_: &mut Devices, name: &str| Device {
        name: Some(name.into()),
    });
    // `device.Class` falls back to this indexer, so one getter covers every class.
    engine.register_indexer_get(|d: &mut Device, class: &str| SkillClass {
        device: d.name.clone(),
        class: class.into(),
    });

    engine.register_fn("search_skills", |_: &mut Device| {
        bridge(&Request::SearchSkills { query: "" })
    });
    engine.register_fn("search_skills", |_: &mut Device, query: &str| {
        bridge(&Request::SearchSkills { query })
    });
    engine.register_fn("get_skill_info", |_: &mut Device, class: &str| {
        bridge(&Request::GetSkillInfo { class })
    });
    engine.register_fn("get_function_info", |_: &mut Device, name: &str| {
        bridge(&Request::GetFunctionInfo { name })
    });

    engine.register_fn("to_string", |d: &mut Device| describe_device(d));
    engine.register_fn("to_debug", |d: &mut Device| describe_device(d));
    engine.register_fn("to_string", |c: &mut SkillClass| describe_class(c));
    engine.register_fn("to_debug", |c: &mut SkillClass| describe_class(c));

    engine
}

/// Skill function names are not known in advance: every method call the script
/// makes (found by walking its AST, function bodies included) is registered on
/// [`SkillClass`] with its arity, so `device.Class.name(...)` reaches [`skill_call`].
/// (Rhai's missing-function hook would also do, but it runs whenever any native
/// function fails, not only when none exists.) The engine is discarded with the
/// instance after the run, so the registrations never outlive the script.
fn register_skill_calls(engine: &mut Engine, ast: &rhai::AST) {
    let mut methods = BTreeSet::new();
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Expr(Expr::MethodCall(call, _))) = path.last() {
            methods.insert((call.name.clone(), call.args.len()));
        }
        true
    });
    for (name, arity) in methods {
        // Kept for describing the proxy itself.
        if name == "to_string" || name == "to_debug" {
            continue;
        }
        let mut types = vec![TypeId::of::<SkillClass>()];
        types.extend(std::iter::repeat_n(TypeId::of::<Dynamic>(), arity));
        engine.register_raw_fn(name.as_str(), types, skill_call);
    }
}

/// `device.Class.function(args...)`: arguments go as written; a single map is taken
/// by the host as named arguments.
fn skill_call(
    ctx: NativeCallContext,
    args: &mut [&mut Dynamic],
) -> Result<Dynamic, Box<EvalAltResult>> {
    let Some((target, rest)) = args.split_first() else {
        return Err("a skill call needs its class".into());
    };
    let class = target
        .read_lock::<SkillClass>()
        .map(|c| c.clone())
        .ok_or("a skill call needs its class")?;
    if let Some(odd) = rest.iter().find(|a| a.is_fnptr() || a.is_variant()) {
        let type_name = ctx.engine().map_type_name(odd.type_name());
        let mut err: Box<EvalAltResult> = format!(
            "a {type_name} cannot be passed to a skill; pass plain values \
             (numbers, strings, booleans, arrays, maps)"
        )
        .into();
        err.set_position(ctx.call_position());
        return Err(err);
    }
    let args = rest
        .iter()
        .map(|a| to_json(a))
        .collect::<Result<Vec<_>, _>>()?;
    bridge(&Request::Call {
        device: class.device.as_deref(),
        class: &class.class,
        function: ctx.fn_name(),
        args,
    })
    .map_err(|mut err| {
        // Rhai does not position errors from raw functions on every call path.
        if err.position().is_none() {
            err.set_position(ctx.call_position());
        }
        err
    })
}

fn describe_device(d: &Device) -> String {
    match &d.name {
        Some(name) => format!("devices[{name:?}]"),
        None => "device".to_string(),
    }
}

fn describe_class(c: &SkillClass) -> String {
    match &c.device {
        Some(name) => format!("devices[{name:?}].{}", c.class),
        None => format!("device.{}", c.class),
    }
}

/// Builds the engine; wizer runs this at build time and snapshots the result.
#[unsafe(no_mangle)]
pub extern "C" fn init() {
    ENGINE.with_borrow_mut(|e| *e = Some(build_engine()));
}

/// Reserves `len` bytes for the host to fill; see the module documentation.
#[unsafe(no_mangle)]
pub extern "C" fn alloc(len: usize) -> *mut u8 {
    Box::into_raw(vec![0u8; len].into_boxed_slice()).cast()
}

/// What the script printed so far, packed; 0 if unavailable.
#[unsafe(no_mangle)]
pub extern "C" fn output() -> u64 {
    OUTPUT.with(|o| o.try_borrow().map(|o| pack(o.text.as_bytes())).unwrap_or(0))
}

/// Runs one script; see the module documentation.
///
/// # Safety
/// `code_ptr`/`code_len` must come from `alloc`; ownership passes to this function.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn run(
    code_ptr: *mut u8,
    code_len: usize,
    max_operations: u64,
    max_string_size: usize,
    max_array_size: usize,
    max_map_size: usize,
    max_call_depth: usize,
    max_expr_depth: usize,
    output_bytes: usize,
) -> u64 {
    let code = unsafe { take_buffer(((code_ptr as usize as u64) << 32) | code_len as u64) };
    OUTPUT.with_borrow_mut(|o| {
        o.text.clear();
        o.cap = output_bytes;
        o.exceeded = false;
    });
    let outcome = ENGINE.with_borrow_mut(|engine| {
        let Some(engine) = engine.as_mut() else {
            return Outcome::Runtime("the sandbox was not initialised".into(), Position::NONE);
        };
        engine
            .set_max_operations(max_operations)
            .set_max_string_size(max_string_size)
            .set_max_array_size(max_array_size)
            .set_max_map_size(max_map_size)
            .set_max_call_levels(max_call_depth)
            .set_max_expr_depths(max_expr_depth, max_expr_depth);
        evaluate(engine, &code)
    });
    let json = OUTPUT.with_borrow(|o| {
        let output = o.text.as_str();
        let result = match outcome {
            _ if o.exceeded => RunResult::Limit {
                output,
                limit: "output",
                message: format!("the script printed more than {output_bytes} bytes"),
            },
            Outcome::Value(value) => RunResult::Ok { output, value },
            Outcome::Syntax(message, pos) => RunResult::Syntax {
                output,
                message,
                line: pos.line().unwrap_or(0),
                column: pos.position().unwrap_or(0),
            },
            Outcome::Runtime(message, pos) => RunResult::Runtime {
                output,
                message,
                line: pos.line().unwrap_or(0),
                column: pos.position().unwrap_or(0),
            },
            Outcome::Limit(limit, message) => RunResult::Limit {
                output,
                limit,
                message,
            },
        };
        serde_json::to_vec(&result).unwrap_or_else(|e| {
            format!(r#"{{"kind":"runtime","output":"","message":"cannot encode the result: {e}","line":0,"column":0}}"#)
                .into_bytes()
        })
    });
    let json = Box::leak(json.into_boxed_slice());
    pack(json)
}

/// How a script ended, before it is encoded for the host.
enum Outcome {
    Value(serde_json::Value),
    Syntax(String, Position),
    Runtime(String, Position),
    Limit(&'static str, String),
}

fn evaluate(engine: &mut Engine, code: &[u8]) -> Outcome {
    let Ok(code) = std::str::from_utf8(code) else {
        return Outcome::Syntax("the code is not valid UTF-8".into(), Position::NONE);
    };
    let ast = match engine.compile(code) {
        Ok(ast) => ast,
        Err(err) => {
            let pos = err.position();
            return match *err.0 {
                ParseErrorType::ExprTooDeep => Outcome::Limit(
                    "depth",
                    format!("expressions are nested too deeply{}", at(pos)),
                ),
                ParseErrorType::LiteralTooLarge(what, max) => Outcome::Limit(
                    "data_size",
                    format!("{what} is longer than the limit of {max}{}", at(pos)),
                ),
                other => Outcome::Syntax(other.to_string(), pos),
            };
        }
    };
    register_skill_calls(engine, &ast);
    match engine.eval_ast::<Dynamic>(&ast) {
        Ok(value) => value_outcome(&value),
        Err(err) => error_outcome(&err),
    }
}

/// `" at line L, column C"`, or nothing when the position is unknown.
fn at(pos: Position) -> String {
    match (pos.line(), pos.position()) {
        (Some(line), Some(column)) => format!(" at line {line}, column {column}"),
        (Some(line), None) => format!(" at line {line}"),
        _ => String::new(),
    }
}

fn value_outcome(value: &Dynamic) -> Outcome {
    // The sandbox's own objects are returned as the code that names them.
    if let Some(device) = value.read_lock::<Device>() {
        return Outcome::Value(describe_device(&device).into());
    }
    if let Some(class) = value.read_lock::<SkillClass>() {
        return Outcome::Value(describe_class(&class).into());
    }
    if value.is::<Devices>() {
        return Outcome::Value("devices".into());
    }
    match to_json(value) {
        Ok(json) => Outcome::Value(json),
        Err(_) => Outcome::Value(serde_json::Value::String(value.to_string())),
    }
}

fn error_outcome(err: &EvalAltResult) -> Outcome {
    let (inner, message, pos) = describe_error(err);
    match inner {
        EvalAltResult::Exit(value, _) => value_outcome(value),
        EvalAltResult::ErrorTooManyOperations(_) => Outcome::Limit(
            "operations",
            format!("the script ran too many operations{}", at(pos)),
        ),
        EvalAltResult::ErrorDataTooLarge(what, _) => Outcome::Limit(
            "data_size",
            format!("{what} grew past its size limit{}", at(pos)),
        ),
        EvalAltResult::ErrorStackOverflow(_) => Outcome::Limit(
            "depth",
            format!("functions call each other too deeply{}", at(pos)),
        ),
        EvalAltResult::ErrorTerminated(..) => Outcome::Limit("output", message),
        EvalAltResult::ErrorParsing(ParseErrorType::ExprTooDeep, _) => Outcome::Limit(
            "depth",
            format!("expressions are nested too deeply{}", at(pos)),
        ),
        EvalAltResult::ErrorParsing(..) => Outcome::Syntax(message, pos),
        _ => Outcome::Runtime(message, pos),
    }
}

/// Finds the error that started it all (through calls of script functions), with a
/// message that names the functions it went through and the innermost position.
fn describe_error(err: &EvalAltResult) -> (&EvalAltResult, String, Position) {
    match err {
        EvalAltResult::ErrorInFunctionCall(name, _, inner, pos) => {
            let (innermost, message, inner_pos) = describe_error(inner);
            let message = if name.starts_with("anon$") {
                format!("{message} (in a closure)")
            } else {
                format!("{message} (in function `{name}`)")
            };
            let pos = if inner_pos.is_none() { *pos } else { inner_pos };
            (innermost, message, pos)
        }
        EvalAltResult::ErrorRuntime(value, pos) => {
            let message = value
                .read_lock::<ImmutableString>()
                .map(|s| s.to_string())
                .unwrap_or_else(|| value.to_string());
            (err, message, *pos)
        }
        other => {
            // Display ends with the position, which the result reports separately.
            let pos = other.position();
            let text = other.to_string();
            let suffix = format!(" ({pos})");
            let message = match text.strip_suffix(&suffix) {
                Some(message) if !pos.is_none() => message.to_string(),
                _ => text,
            };
            (err, message, pos)
        }
    }
}
