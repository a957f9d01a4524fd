//! The sandbox end to end: real Rhai in the real wasm guest under real wasmtime,
//! talking to a small fake skill table. The skills are not the subject here; the
//! table only answers (and rejects) calls the way the real registry would.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strawberry_spoke::sandbox::{
    DeviceHandler, DeviceRequest, LimitKind, Limits, RunError, RunOutcome, Sandbox, SandboxError,
};

use crate::support::cpu;

/// One function of the fake skill table.
struct Function {
    class: &'static str,
    name: &'static str,
    /// `(name, type, default)`; types are `int`, `string`, `bool`.
    params: &'static [(&'static str, &'static str, Option<&'static str>)],
    signature: &'static str,
}

const FUNCTIONS: &[Function] = &[
    Function {
        class: "TimerSkill",
        name: "start",
        params: &[("seconds", "int", None), ("label", "string", Some("timer"))],
        signature: "start(seconds: int, label: string = \"timer\") -> int",
    },
    Function {
        class: "TimerSkill",
        name: "remaining",
        params: &[("label", "string", None)],
        signature: "remaining(label: string) -> int",
    },
    Function {
        class: "LightSkill",
        name: "set",
        params: &[("room", "string", None), ("on", "bool", None)],
        signature: "set(room: string, on: bool) -> string",
    },
    Function {
        class: "SlowSkill",
        name: "wait",
        params: &[("ms", "int", None)],
        signature: "wait(ms: int) -> int",
    },
];

/// The fake registry: checks calls like the real one and records every request.
#[derive(Default)]
struct FakeSkills {
    requests: Mutex<Vec<DeviceRequest>>,
    next_timer: AtomicI64,
}

impl FakeSkills {
    fn requests(&self) -> Vec<DeviceRequest> {
        self.requests.lock().unwrap().clone()
    }

    fn call(
        &self,
        device: Option<&str>,
        class: &str,
        function: &str,
        args: &[Value],
    ) -> Result<Value, String> {
        if let Some(device) = device
            && device != "kitchen"
        {
            return Err(format!(
                "no device named `{device}` is online; known devices: kitchen"
            ));
        }
        if !FUNCTIONS.iter().any(|f| f.class == class) {
            return Err(format!(
                "no skill class `{class}`; use device.search_skills(\"...\") to find one"
            ));
        }
        let f = FUNCTIONS
            .iter()
            .find(|f| f.class == class && f.name == function)
            .ok_or_else(|| {
                format!(
                    "{class} has no function `{function}`; see device.get_skill_info(\"{class}\")"
                )
            })?;
        let bound = bind(f, args).map_err(|e| format!("{class}.{}: {e}", f.signature))?;
        Ok(match (class, function) {
            ("TimerSkill", "start") => json!(self.next_timer.fetch_add(1, Ordering::SeqCst) + 1),
            ("TimerSkill", "remaining") => json!(42),
            ("LightSkill", "set") => json!(format!(
                "{} light {}",
                bound[0].as_str().unwrap_or_default(),
                if bound[1] == json!(true) { "on" } else { "off" }
            )),
            ("SlowSkill", "wait") => {
                let ms = bound[0].as_u64().unwrap_or(0);
                std::thread::sleep(Duration::from_millis(ms));
                json!(ms)
            }
            _ => unreachable!("every function in FUNCTIONS is served above"),
        })
    }
}

/// Binds positional arguments, or one map of named ones, to `f`'s parameters.
fn bind(f: &Function, args: &[Value]) -> Result<Vec<Value>, String> {
    let named = match args {
        [Value::Object(map)] => Some(map),
        _ => None,
    };
    if let Some(map) = named
        && let Some(unknown) = map.keys().find(|k| !f.params.iter().any(|p| p.0 == *k))
    {
        return Err(format!("no parameter named `{unknown}`"));
    }
    if named.is_none() && args.len() > f.params.len() {
        return Err(format!(
            "takes at most {} arguments, got {}",
            f.params.len(),
            args.len()
        ));
    }
    let mut bound = Vec::new();
    for (i, (name, ty, default)) in f.params.iter().enumerate() {
        let value = match named {
            Some(map) => map.get(*name).cloned(),
            None => args.get(i).cloned(),
        };
        let value = match (value, default) {
            (Some(v), _) => v,
            (None, Some(d)) => json!(d),
            (None, None) => return Err(format!("missing argument `{name}`")),
        };
        let fits = match *ty {
            "int" => value.is_i64(),
            "string" => value.is_string(),
            "bool" => value.is_boolean(),
            _ => false,
        };
        if !fits {
            return Err(format!("argument `{name}` must be {ty}, got {value}"));
        }
        bound.push(value);
    }
    Ok(bound)
}

impl DeviceHandler for FakeSkills {
    fn handle(&self, request: DeviceRequest) -> Result<Value, String> {
        self.requests.lock().unwrap().push(request.clone());
        match request {
            DeviceRequest::SearchSkills { query } => Ok(FUNCTIONS
                .iter()
                .filter(|f| {
                    let q = query.to_lowercase();
                    f.class.to_lowercase().contains(&q) || f.name.contains(&q)
                })
                .map(|f| json!({"name": f.name, "class": f.class, "summary": f.signature, "devices": ["here"]}))
                .collect()),
            DeviceRequest::GetSkillInfo { class } => {
                let sigs: Vec<_> = FUNCTIONS
                    .iter()
                    .filter(|f| f.class == class)
                    .map(|f| f.signature)
                    .collect();
                if sigs.is_empty() {
                    Err(format!("no skill class `{class}`"))
                } else {
                    Ok(json!(sigs))
                }
            }
            DeviceRequest::GetFunctionInfo { name } => FUNCTIONS
                .iter()
                .find(|f| format!("{}.{}", f.class, f.name) == name || f.name == name)
                .map(|f| json!(format!("{}.{}", f.class, f.signature)))
                .ok_or_else(|| format!("no function `{name}`")),
            DeviceRequest::Call {
                device,
                class,
                function,
                args,
            } => self.call(device.as_deref(), &class, &function, &args),
        }
    }
}

fn sandbox() -> Sandbox {
    Sandbox::new(Limits::default()).expect("the sandbox starts with the default limits")
}

fn run(code: &str) -> (RunOutcome, FakeSkills) {
    let skills = FakeSkills::default();
    let outcome = sandbox().run(code, &skills);
    (outcome, skills)
}

#[test]
fn returns_value_and_output() {
    let (outcome, _) = run("print(\"hello\");\ndebug(\"dbg\");\nlet x = 40;\nx + 2");
    assert_eq!(outcome.result, Ok(json!(42)));
    assert_eq!(outcome.output, "hello\n\"dbg\"\n");
    assert_eq!(outcome.device_calls, 0);

    let (outcome, _) = run("#{name: \"tea\", items: [1, 2.5, true, ()]}");
    assert_eq!(
        outcome.result,
        Ok(json!({"name": "tea", "items": [1, 2.5, true, null]}))
    );
}

#[test]
fn syntax_error_has_line_and_column() {
    let (outcome, _) = run("let a = 1;\nlet b = (a + ;\n");
    match outcome.result {
        Err(RunError::Syntax {
            line,
            column,
            message,
        }) => {
            assert_eq!((line, column), (2, 14), "{message}");
        }
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

#[test]
fn runtime_error_has_line_and_column() {
    let (outcome, _) = run("let a = 1;\nif a > 0 {\n    throw \"boom\";\n}");
    assert_eq!(
        outcome.result,
        Err(RunError::Runtime {
            message: "boom".into(),
            line: 3,
            column: 5
        })
    );

    // Inside a function the position is where it failed, and the message says where
    // it was called from.
    let (outcome, _) = run("fn half(x) {\n  x / 0\n}\nprint(\"before\");\nhalf(4)");
    match outcome.result {
        Err(RunError::Runtime {
            message,
            line,
            column,
        }) => {
            assert_eq!((line, column), (2, 5), "{message}");
            assert!(message.contains("Division by zero"), "{message}");
            assert!(message.contains("`half`"), "{message}");
        }
        other => panic!("expected a runtime error, got {other:?}"),
    }
    assert_eq!(outcome.output, "before\n");
}

#[test]
fn device_calls_positional_and_named() {
    let (outcome, skills) = run(concat!(
        "let a = device.TimerSkill.start(300, \"tea\");\n",
        "let b = device.TimerSkill.start(#{seconds: 60});\n",
        "let c = device.LightSkill.set(\"hall\", true);\n",
        "[a, b, c]"
    ));
    assert_eq!(outcome.result, Ok(json!([1, 2, "hall light on"])));
    assert_eq!(outcome.device_calls, 3);
    assert_eq!(
        skills.requests(),
        vec![
            DeviceRequest::Call {
                device: None,
                class: "TimerSkill".into(),
                function: "start".into(),
                args: vec![json!(300), json!("tea")],
            },
            DeviceRequest::Call {
                device: None,
                class: "TimerSkill".into(),
                function: "start".into(),
                args: vec![json!({"seconds": 60})],
            },
            DeviceRequest::Call {
                device: None,
                class: "LightSkill".into(),
                function: "set".into(),
                args: vec![json!("hall"), json!(true)],
            },
        ]
    );
}

#[test]
fn device_is_reachable_inside_functions_and_closures() {
    let (outcome, _) = run(concat!(
        "fn set_timer(s) { device.TimerSkill.start(s) }\n",
        "let f = |s| device.TimerSkill.start(s, \"closure\");\n",
        "[set_timer(1), f.call(2)]"
    ));
    assert_eq!(outcome.result, Ok(json!([1, 2])));
}

#[test]
fn handler_errors_are_catchable() {
    let (outcome, _) = run(concat!(
        "let answer = \"none\";\n",
        "try {\n",
        "    device.TimerSkill.start(\"five\");\n",
        "} catch (e) {\n",
        "    print(e);\n",
        "    answer = \"caught\";\n",
        "}\n",
        "answer"
    ));
    assert_eq!(outcome.result, Ok(json!("caught")));
    assert!(
        outcome.output.contains("argument `seconds` must be int")
            && outcome.output.contains("start(seconds: int"),
        "the script reads the handler's message: {}",
        outcome.output
    );
}

#[test]
fn uncaught_handler_error_is_a_runtime_error_at_the_call() {
    let (outcome, _) = run("let x = 1;\nlet y = device.Nope.thing(x);");
    match outcome.result {
        Err(RunError::Runtime {
            message,
            line,
            column,
        }) => {
            assert!(message.contains("no skill class `Nope`"), "{message}");
            assert_eq!(line, 2, "{message} at column {column}");
        }
        other => panic!("expected a runtime error, got {other:?}"),
    }
}

#[test]
fn search_and_info_reach_the_handler() {
    let (outcome, skills) = run(concat!(
        "let all = device.search_skills();\n",
        "let timers = device.search_skills(\"timer\");\n",
        "let info = device.get_skill_info(\"LightSkill\");\n",
        "let f = device.get_function_info(\"TimerSkill.remaining\");\n",
        "[all.len(), timers.len(), timers[0].class, info, f]"
    ));
    assert_eq!(
        outcome.result,
        Ok(json!([
            4,
            2,
            "TimerSkill",
            ["set(room: string, on: bool) -> string"],
            "TimerSkill.remaining(label: string) -> int"
        ]))
    );
    assert_eq!(
        skills.requests(),
        vec![
            DeviceRequest::SearchSkills { query: "".into() },
            DeviceRequest::SearchSkills {
                query: "timer".into()
            },
            DeviceRequest::GetSkillInfo {
                class: "LightSkill".into()
            },
            DeviceRequest::GetFunctionInfo {
                name: "TimerSkill.remaining".into()
            },
        ]
    );
}

#[test]
fn explicit_device_fills_the_device() {
    let (outcome, skills) = run("devices[\"kitchen\"].TimerSkill.remaining(\"eggs\")");
    assert_eq!(outcome.result, Ok(json!(42)));
    assert_eq!(
        skills.requests(),
        vec![DeviceRequest::Call {
            device: Some("kitchen".into()),
            class: "TimerSkill".into(),
            function: "remaining".into(),
            args: vec![json!("eggs")],
        }]
    );
}

#[test]
fn no_state_leaks_between_runs() {
    let sandbox = sandbox();
    let skills = FakeSkills::default();
    let first = sandbox.run(
        "let secret = 42;\nfn helper() { 7 }\nprint(\"first run\");\nsecret + helper()",
        &skills,
    );
    assert_eq!(first.result, Ok(json!(49)));

    let second = sandbox.run("secret", &skills);
    assert!(
        matches!(&second.result, Err(RunError::Runtime { message, .. }) if message.contains("secret")),
        "{:?}",
        second.result
    );
    assert_eq!(second.output, "");
    let third = sandbox.run("helper()", &skills);
    assert!(
        matches!(&third.result, Err(RunError::Runtime { message, .. }) if message.contains("helper")),
        "{:?}",
        third.result
    );
}

#[test]
fn time_in_device_calls_is_not_charged_to_the_script() {
    let sandbox = Sandbox::new(Limits {
        wall_time: Duration::from_millis(200),
        ..Limits::default()
    })
    .unwrap();
    let skills = FakeSkills::default();
    let outcome = sandbox.run(
        "let a = device.SlowSkill.wait(300);\nlet b = device.SlowSkill.wait(300);\na + b",
        &skills,
    );
    assert_eq!(outcome.result, Ok(json!(600)));
    assert!(outcome.elapsed >= Duration::from_millis(600));
    assert!(outcome.device_time >= Duration::from_millis(600));
    assert_eq!(outcome.device_calls, 2);

    // The script's own time still counts, before and after the call.
    let started = Instant::now();
    let outcome = Sandbox::new(Limits {
        wall_time: Duration::from_millis(200),
        max_operations: 0,
        ..Limits::default()
    })
    .unwrap()
    .run(
        "device.SlowSkill.wait(300);\nlet s = \"a\";\ns.pad(60000, \"a\");\nloop { s.index_of(\"b\"); }",
        &skills,
    );
    assert!(
        matches!(
            outcome.result,
            Err(RunError::Limit {
                limit: LimitKind::Time,
                ..
            })
        ),
        "{:?}",
        outcome.result
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(700),
        "300 ms in the skill plus 200 ms of script, took {took:?}"
    );
}

#[test]
fn output_printed_before_a_trap_is_kept() {
    let sandbox = Sandbox::new(Limits {
        wall_time: Duration::from_millis(200),
        max_operations: 0,
        ..Limits::default()
    })
    .unwrap();
    let outcome = sandbox.run(
        "print(\"working\");\nlet s = \"a\";\ns.pad(60000, \"a\");\nloop { s.index_of(\"b\"); }",
        &FakeSkills::default(),
    );
    assert!(matches!(
        outcome.result,
        Err(RunError::Limit {
            limit: LimitKind::Time,
            ..
        })
    ));
    assert_eq!(outcome.output, "working\n");
}

#[test]
fn one_sandbox_serves_several_threads() {
    let sandbox = sandbox();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let sandbox = &sandbox;
            scope.spawn(move || {
                let skills = FakeSkills::default();
                for i in 0..25 {
                    let outcome = sandbox.run(
                        &format!("print({t});\ndevice.TimerSkill.start({i}) + {i}"),
                        &skills,
                    );
                    assert_eq!(outcome.result, Ok(json!(i + i + 1)));
                    assert_eq!(outcome.output, format!("{t}\n"));
                }
            });
        }
    });
}

#[test]
fn a_memory_limit_below_the_interpreter_is_refused() {
    let error = Sandbox::new(Limits {
        memory_bytes: 64 * 1024,
        ..Limits::default()
    })
    .expect_err("64 KiB cannot hold the interpreter");
    assert!(
        matches!(error, SandboxError::MemoryTooSmall { needed, .. } if needed > 64 * 1024),
        "{error}"
    );
}

/// What a corpus program declares in its first line, e.g. `// expect: limit time`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expected {
    Syntax,
    Runtime,
    Limit(LimitKind),
}

fn expectation(path: &Path, code: &str) -> Expected {
    let first = code.lines().next().unwrap_or_default();
    let spec = first
        .strip_prefix("// expect: ")
        .unwrap_or_else(|| panic!("{}: first line must be `// expect: ...`", path.display()));
    match spec.trim() {
        "syntax" => Expected::Syntax,
        "runtime" => Expected::Runtime,
        "limit time" => Expected::Limit(LimitKind::Time),
        "limit memory" => Expected::Limit(LimitKind::Memory),
        "limit operations" => Expected::Limit(LimitKind::Operations),
        "limit output" => Expected::Limit(LimitKind::Output),
        "limit data_size" => Expected::Limit(LimitKind::DataSize),
        "limit depth" => Expected::Limit(LimitKind::Depth),
        other => panic!("{}: unknown expectation `{other}`", path.display()),
    }
}

fn actual(result: &Result<Value, RunError>) -> Option<Expected> {
    match result {
        // Nothing cancels these runs, so a cancellation is no expected ending either.
        Ok(_) | Err(RunError::Cancelled) => None,
        Err(RunError::Syntax { .. }) => Some(Expected::Syntax),
        Err(RunError::Runtime { .. }) => Some(Expected::Runtime),
        Err(RunError::Limit { limit, .. }) => Some(Expected::Limit(*limit)),
    }
}

/// Every program in `tests/hostile/` ends the way its first line says, within the
/// wall-clock limit plus 100 ms, and the sandbox runs a normal script right after.
#[test]
fn hostile_corpus() {
    // Two threads that must count 5 million operations before a wall clock runs out:
    // with Whisper beside them the clock can win.
    let _cores = cpu::quiet_blocking();
    // The default limits, with a shorter wall clock to keep the suite quick (but
    // long enough that 5 million operations end first on a busy 2-core machine).
    let limits = Limits {
        wall_time: Duration::from_secs(2),
        ..Limits::default()
    };
    let deadline = limits.wall_time + Duration::from_millis(100);
    let sandbox = Sandbox::new(limits).unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let mut programs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rhai"))
        .collect();
    programs.sort();
    assert!(
        programs.len() >= 40,
        "the corpus has {} programs",
        programs.len()
    );

    let failures = Mutex::new(Vec::new());
    let next = Mutex::new(programs.iter());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                let skills = FakeSkills::default();
                loop {
                    let Some(path) = next.lock().unwrap().next() else {
                        return;
                    };
                    let code = std::fs::read_to_string(path).unwrap();
                    let expected = expectation(path, &code);
                    let outcome = sandbox.run(&code, &skills);
                    let name = path.file_name().unwrap().to_string_lossy();
                    let got = actual(&outcome.result);
                    if got != Some(expected) {
                        failures.lock().unwrap().push(format!(
                            "{name}: expected {expected:?}, got {:?} after {:?}",
                            outcome.result, outcome.elapsed
                        ));
                    } else if outcome.elapsed.saturating_sub(outcome.device_time) > deadline {
                        // Time inside skill calls is not the script's (see
                        // `time_in_device_calls_is_not_charged_to_the_script`).
                        failures.lock().unwrap().push(format!(
                            "{name}: took {:?} ({:?} in skill calls), past the {deadline:?} deadline",
                            outcome.elapsed, outcome.device_time
                        ));
                    }
                    let after = sandbox.run("print(\"fine\"); 1 + 1", &skills);
                    if after.result != Ok(json!(2)) || after.output != "fine\n" {
                        failures.lock().unwrap().push(format!(
                            "{name}: the next run failed: {:?}",
                            after.result
                        ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn recursion_past_the_stack_is_the_depth_limit() {
    // With Rhai's own limit out of the way, the wasm stack is what stops it; the
    // host reports that as the depth limit and carries on.
    let sandbox = Sandbox::new(Limits {
        max_call_depth: 1_000_000,
        ..Limits::default()
    })
    .unwrap();
    let skills = FakeSkills::default();
    for code in [
        "fn f(n) { f(n + 1) }\nf(0)",
        "fn f(n) { let a = [n, #{b: n}]; 1 + f(n + 1) }\nf(0)",
    ] {
        let outcome = sandbox.run(code, &skills);
        assert!(
            matches!(
                outcome.result,
                Err(RunError::Limit {
                    limit: LimitKind::Depth,
                    ..
                })
            ),
            "{code}: {:?}",
            outcome.result
        );
    }
    assert_eq!(sandbox.run("1 + 1", &skills).result, Ok(json!(2)));
}

#[test]
fn a_value_over_the_result_limit_is_the_output_limit() {
    // Within every size limit inside the guest (10 000 elements), 190 KB as JSON.
    let (outcome, _) =
        run("print(\"built\");\nlet a = [];\nfor i in 0..10000 { a.push(1.0 / 3.0); }\na");
    assert!(
        matches!(
            outcome.result,
            Err(RunError::Limit {
                limit: LimitKind::Output,
                ..
            })
        ),
        "{:?}",
        outcome.result.as_ref().map(|v| v.to_string().len())
    );
    assert_eq!(outcome.output, "built\n");

    // Just under the limit passes whole.
    let limit = Limits::default().result_bytes;
    let (outcome, _) = run(&format!("let s = \"\";\ns.pad({}, \"x\");\ns", limit - 2));
    assert_eq!(outcome.result.map(|v| v.to_string().len()), Ok(limit));
}
