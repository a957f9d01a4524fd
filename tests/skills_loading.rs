//! Loading skill files: what good files turn into, and the exact errors of broken ones.

use std::path::{Path, PathBuf};

use strawberry_spoke::host::HostSettings;
use strawberry_spoke::skills::{LoadError, LookupError, Registry, ValueType};

use crate::support::skill;

fn settings() -> HostSettings {
    skill::quick_settings()
}

fn fixtures(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Loads one skill written to a temporary file called `file_name`.
fn load_text(file_name: &str, text: &str) -> Result<String, String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(file_name);
    std::fs::write(&path, text).expect("write skill");
    Registry::load_file(&path, &settings())
        .map(|class| class.doc.name)
        .map_err(|e| {
            let shown = e.to_string();
            shown.replace(&format!("{}", dir.path().display()), "DIR")
        })
}

#[test]
fn good_files_load_with_their_documentation() {
    let (registry, errors) = Registry::load(&fixtures("skills_good"), &settings());
    assert!(errors.is_empty(), "{errors:?}");
    let names: Vec<&str> = registry.classes().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "CallsSkill",
            "ClimateSkill",
            "ClockSkill",
            "MusicSkill",
            "SystemInfoSkill",
            "TimerSkill",
            "VolumeSkill"
        ]
    );

    let timer = registry.class("TimerSkill").expect("TimerSkill");
    assert_eq!(timer.summary, "Kitchen timers that ring on this device.");
    assert_eq!(
        timer.description,
        "Timers are kept by label; starting one with a label in use replaces it."
    );
    assert_eq!(timer.examples.len(), 2);
    assert_eq!(timer.examples[0].request, "Set a timer for five minutes");
    assert_eq!(timer.examples[0].code, "device.TimerSkill.start(300)");
    assert_eq!(
        timer.examples[1].code,
        "let t = device.TimerSkill.remaining(\"tea\");\nprint(`${t} seconds left`);"
    );
    let names: Vec<&str> = timer.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        ["start", "remaining", "clear_all"],
        "private and _ functions are not exported"
    );

    let start = &timer.functions[0];
    assert_eq!(
        start.signature(),
        "start(seconds: int, label: string = \"timer\") -> string"
    );
    assert_eq!(start.qualified_name(), "TimerSkill.start");
    assert_eq!(start.summary, "Start a countdown timer.");
    assert_eq!(start.docstring, "The timer rings when it reaches zero.");
    assert_eq!(
        start.params[0].description,
        "How long the timer runs, in seconds."
    );
    assert_eq!(start.params[1].default, Some(serde_json::json!("timer")));
    assert_eq!(start.returns, ValueType::String);
    assert_eq!(start.returns_doc, "A description of the new timer.");
    assert!(start.confirm);
    assert!(start.model_callable);
    assert_eq!(start.line, 20);
    assert!(start.file.ends_with("timer.rhai"));

    let clear = &timer.functions[2];
    assert_eq!(clear.signature(), "clear_all() -> ()");
    assert!(!clear.model_callable, "@no_model");
    assert!(!clear.confirm);

    let volume = registry.class("VolumeSkill").expect("VolumeSkill");
    assert_eq!(
        volume.functions[0].signature(),
        "set_volume(level: int, step: int = 5) -> ()"
    );
    assert_eq!(
        volume.functions[1].signature(),
        "louder(amount: float = 10.0) -> float"
    );
    let echo = registry.function("SystemInfoSkill.echo").expect("echo");
    assert_eq!(
        echo.signature(),
        "echo(options: map, extra: any = ()) -> array"
    );
    let temperature = registry.function("temperature").expect("unique bare name");
    assert_eq!(
        temperature.class, "ClimateSkill",
        "@class overrides the file name"
    );
    assert_eq!(
        registry.class("ClimateSkill").map(|c| c.summary.as_str()),
        Some("Reads the room climate sensors.")
    );
    assert!(
        registry.class("ClockSkill").is_some(),
        "clock_skill.rhai does not become ClockSkillSkill"
    );
}

#[test]
fn broken_files_are_reported_with_positions_and_the_rest_load() {
    let (registry, errors) = Registry::load(&fixtures("skills_broken"), &settings());
    let dir = fixtures("skills_broken");
    let shown: Vec<String> = errors
        .iter()
        .map(|e| e.to_string().replace(&format!("{}/", dir.display()), ""))
        .collect();
    assert_eq!(
        shown,
        [
            "bad_tag.rhai:4:5: unknown tag `@parm`; did you mean `@param`?",
            "dup_b.rhai:3:12: class `Duplicate` is already defined in dup_a.rhai; give this file another name or a `//! @class OtherName` line",
            "no_summary.rhai:1:1: missing class summary; start the file with a `//! One-line summary.` line",
            "reserved.rhai:4:4: function name `call` is reserved: `x.call(...)` always calls a function pointer; rename the function",
            "syntax.rhai:5:13: syntax error: Unexpected ';'",
            "toplevel.rhai:3:1: code outside a function never runs (calls go straight to a function); move it into a function",
            "unknown_fn.rhai:7:13: unknown function `pars_int`; did you mean `parse_int`?",
            "unknown_method.rhai:7:10: unknown function `to_uper` (called as a method); did you mean `to_upper`?",
            "unknown_type.rhai:4:21: unknown type `integer` in `@param seconds`; use one of int, float, bool, string, array, map, any",
        ]
    );
    let names: Vec<&str> = registry.classes().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["Duplicate", "GoodSkill", "UndocumentedSkill"]);
    assert_eq!(
        registry
            .class("Duplicate")
            .map(|c| c.functions[0].name.as_str()),
        Some("thing"),
        "the first file wins"
    );
    let err: &LoadError = &errors[0];
    assert_eq!((err.line, err.column), (4, 5));
}

#[test]
fn a_missing_folder_is_one_clear_error() {
    let missing = fixtures("no_such_folder");
    let (registry, errors) = Registry::load(&missing, &settings());
    assert!(registry.classes().is_empty());
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].file, missing);
    assert!(
        errors[0]
            .to_string()
            .contains("skills folder does not exist"),
        "{}",
        errors[0]
    );
}

#[test]
fn doc_comment_mistakes_name_the_fix() {
    let cases: [(&str, &str); 11] = [
        (
            "//! S.\n\n/// Run.\n/// @param b: int  B.\n/// @param a: int  A.\nfn run(a, b) {}\n",
            "DIR/t.rhai:5:12: `@param a` is out of order; document the parameters in the order of `fn run(a, b)`",
        ),
        (
            "//! S.\n\n/// Run.\n/// @param secs: int  How long.\nfn run(seconds) {}\n",
            "DIR/t.rhai:4:12: `@param secs` names no parameter of `run`; the parameters are `fn run(seconds)`",
        ),
        (
            "//! S.\n\n/// Run.\n/// @param a: int = 1  A.\n/// @param b: int  B.\nfn run(a, b) {}\n",
            "DIR/t.rhai:5:12: parameter `b` has no default but follows `a`, which has one; give it a default or move it before `a`",
        ),
        (
            "//! S.\n\n/// Run.\n/// @param a: int = \"x\"  A.\nfn run(a) {}\n",
            "DIR/t.rhai:4:21: bad default `\"x\"` for `a`: it is not of type int; defaults are literals such as 10, 1.5, true, \"text\", [], #{}, ()",
        ),
        (
            "//! S.\n\n/// Run.\n/// @param a: int = nope  A.\nfn run(a) {}\n",
            "DIR/t.rhai:4:21: bad default `nope` for `a`: not a literal; defaults are literals such as 10, 1.5, true, \"text\", [], #{}, ()",
        ),
        (
            "//! S.\n\n/// Run.\n/// @return number  N.\nfn run() {}\n",
            "DIR/t.rhai:4:13: unknown type `number` in `@return`; use one of int, float, bool, string, array, map, any, ()",
        ),
        (
            "//! S.\n\n/// @param a: int  A.\nfn run(a) {}\n",
            "DIR/t.rhai:4:4: function `run` has no summary; add a `/// One-line summary.` line above it",
        ),
        (
            "//! S.\n//! @example Do it\n\n/// Run.\nfn run() {}\n",
            "DIR/t.rhai:2:1: `@example Do it` has no code; put the code on the `//!` lines after it",
        ),
        (
            "//! S.\n\n/// Run.\nfn run() {}\n\n/// Run again.\n/// @param a: int  A.\nfn run(a) {}\n",
            "DIR/t.rhai:8:4: `run` is already defined on line 4; a skill exports one function per name, so rename one or make it `private`",
        ),
        (
            "//! S.\n\n/// Run.\n/// @request\nfn run() {}\n",
            "DIR/t.rhai:4:5: `@request` needs what a person would say, e.g. `/// @request put the telly on`",
        ),
        (
            "//! S.\n\n/// Run.\n/// @example run it\nfn run() {}\n",
            "DIR/t.rhai:4:5: `@example` belongs in the class's `//!` comment, with code; to say how people ask for this function, write `/// @request put the telly on`",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(
            load_text("t.rhai", text),
            Err(expected.to_string()),
            "for:\n{text}"
        );
    }
}

#[test]
fn class_names_come_from_file_names() {
    let text = "//! S.\n\n/// Run.\nfn run() {}\n";
    assert_eq!(
        load_text("system_info.rhai", text),
        Ok("SystemInfoSkill".to_string())
    );
    assert_eq!(load_text("music.rhai", text), Ok("MusicSkill".to_string()));
    assert_eq!(
        load_text("clock_skill.rhai", text),
        Ok("ClockSkill".to_string())
    );
    assert_eq!(
        load_text("2fa.rhai", text),
        Err("DIR/2fa.rhai:1:1: cannot make a class name from the file name `2fa`; add a `//! @class Name` line".to_string())
    );
}

#[test]
fn reserved_words_and_eval_are_rejected() {
    let reserved = load_text(
        "t.rhai",
        "//! S.\n\n/// Run.\nfn run() {\n    let match = 1;\n}\n",
    );
    assert_eq!(
        reserved,
        Err("DIR/t.rhai:5:9: `match` is a reserved word in Rhai; use another name".to_string())
    );
    let print = load_text("t.rhai", "//! S.\n\n/// Out.\nfn print(x) {}\n");
    assert!(
        print
            .as_ref()
            .is_err_and(|e| e.starts_with("DIR/t.rhai:4:4: function name `print` is reserved")),
        "{print:?}"
    );
    let eval = load_text(
        "t.rhai",
        "//! S.\n\n/// Run.\nfn run() {\n    eval(\"1\")\n}\n",
    );
    assert_eq!(eval, Err("DIR/t.rhai:5:5: `eval` is not available in skills (it would hide calls from this check); call functions directly".to_string()));
}

#[test]
fn function_lookup_suggests_close_names_and_lists_ambiguous_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    for name in ["lamp", "fan"] {
        std::fs::write(
            dir.path().join(format!("{name}.rhai")),
            "//! A device.\n\n/// Is it on?\n/// @return bool  On or off.\nfn status() { true }\n",
        )
        .expect("write");
    }
    let (registry, errors) = Registry::load(dir.path(), &settings());
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        registry.function("status").map(|f| f.qualified_name()),
        Err(LookupError::Ambiguous {
            name: "status".to_string(),
            candidates: vec![
                "FanSkill.status".to_string(),
                "LampSkill.status".to_string()
            ],
        })
    );
    assert_eq!(
        registry
            .function("LampSkill.status")
            .map(|f| f.qualified_name()),
        Ok("LampSkill.status".to_string())
    );
    let typo = registry
        .function("LampSkill.stats")
        .map(|f| f.qualified_name());
    assert_eq!(
        typo,
        Err(LookupError::NotFound {
            name: "LampSkill.stats".to_string(),
            suggestions: vec!["LampSkill.status".to_string()]
        })
    );
    assert_eq!(
        typo.map_err(|e| e.to_string()),
        Err("no skill function `LampSkill.stats`; did you mean `LampSkill.status`?".to_string())
    );
    let bare = registry.function("statsu").map_err(|e| e.to_string());
    assert_eq!(bare, Err("no skill function `statsu`; did you mean one of `FanSkill.status`, `LampSkill.status`?".to_string()));
}

#[test]
fn registry_and_classes_are_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Registry>();
    assert_send_sync::<strawberry_spoke::skills::SkillClass>();
}

#[test]
fn function_pointers_by_name_are_checked_too() {
    let text = "//! S.\n\n/// Run.\nfn run() {\n    Fn(\"rnu\")\n}\n";
    assert_eq!(
        load_text("t.rhai", text),
        Err("DIR/t.rhai:5:5: unknown function `rnu`; did you mean `run`?".to_string())
    );
}

#[test]
fn parameters_come_from_rhai_and_fn_lines_in_strings_are_not_functions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("multi.rhai");
    let text = "//! S.\n//! @class   Multi\n\n/// Add.\n/// @param a: int  A.\n/// @param b: int = 2  B.\n/// @return int  Sum.\nfn add(a,\n       b) {\n    let s = `\nfn fake() {}\n`;\n    a + b\n}\n";
    std::fs::write(&path, text).expect("write");
    let class = Registry::load_file(&path, &settings()).expect("loads");
    assert_eq!(class.name, "Multi");
    let names: Vec<String> = class.functions.iter().map(|f| f.signature()).collect();
    assert_eq!(names, ["add(a: int, b: int = 2) -> int"]);

    let copy = dir.path().join("copy.rhai");
    std::fs::write(&copy, text).expect("write");
    let (_, errors) = Registry::load(dir.path(), &settings());
    assert_eq!(errors.len(), 1);
    assert_eq!(
        (errors[0].line, errors[0].column),
        (2, 14),
        "points at the class name: {}",
        errors[0]
    );
}

#[test]
fn a_blank_line_between_docs_and_fn_is_forgiven_but_code_is_not() {
    let gap = "//! S.\n\n/// Run.\n\nfn run() {}\n";
    assert_eq!(load_text("t.rhai", gap), Ok("TSkill".to_string()));
    let comment = "//! S.\n\n/// Run.\n// A plain comment.\nfn run() {}\n";
    assert_eq!(
        load_text("t.rhai", comment),
        Err("DIR/t.rhai:5:4: function `run` has no summary; add a `/// One-line summary.` line above it".to_string())
    );
}

#[test]
fn a_parameter_without_its_param_line_loads_as_any_with_a_warning() {
    let (registry, _) = Registry::load(&fixtures("skills_broken"), &settings());
    let class = registry.class("UndocumentedSkill").expect("it loads");
    assert_eq!(
        class.functions[0].signature(),
        "start(seconds: int, label: any) -> ()"
    );
    let dir = fixtures("skills_broken");
    let warnings: Vec<String> = class
        .warnings
        .iter()
        .map(|w| w.to_string().replace(&format!("{}/", dir.display()), ""))
        .collect();
    assert_eq!(
        warnings,
        [
            "undocumented.rhai:5:19: parameter `label` of `start` has no `@param` line, so it takes any value and the model is told nothing about it; add `/// @param label: <type>  <description>`"
        ]
    );
    // Any value, but still the right count.
    assert!(
        registry
            .call("UndocumentedSkill", "start", &[5.into(), "pasta".into()])
            .is_ok()
    );
    assert!(
        registry
            .call("UndocumentedSkill", "start", &[5.into(), 7.into()])
            .is_ok()
    );
    assert!(
        registry
            .call("UndocumentedSkill", "start", &[5.into()])
            .is_err()
    );
    // Documented parameters keep their order rules: a later one may be left out.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.rhai");
    std::fs::write(
        &path,
        "//! S.\n\n/// Run.\n/// @param b: int  B.\nfn run(a, b) {}\n",
    )
    .unwrap();
    let class = Registry::load_file(&path, &settings()).expect("loads");
    assert_eq!(class.functions[0].signature(), "run(a: any, b: int) -> ()");
    assert_eq!(class.warnings.len(), 1);
}

#[test]
fn request_lines_are_kept_in_order_and_bounded_with_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tv.rhai");
    let many: String = (1..=17)
        .map(|n| format!("/// @request put channel {n} on\n"))
        .collect();
    let long = "very ".repeat(50);
    std::fs::write(
        &path,
        format!(
            "//! The TV.\n\n/// Switch the TV on.\n/// @request put the telly on\n/// @request I want to watch\n///   something\nfn power_on() {{}}\n\n/// Change the channel.\n{many}/// @request a {long}long one\n/// @param n: int  The channel.\nfn channel(n) {{}}\n"
        ),
    )
    .unwrap();
    let class = Registry::load_file(&path, &settings()).expect("loads");
    assert_eq!(
        class.functions[0].requests,
        ["put the telly on", "I want to watch something"]
    );
    let channel = &class.functions[1];
    assert_eq!(channel.requests.len(), 16);
    assert_eq!(channel.requests[15], "put channel 16 on");
    // Prose and tags after `@request` lines still land where they belong.
    assert_eq!(channel.summary, "Change the channel.");
    assert_eq!(channel.signature(), "channel(n: int) -> ()");
    let warnings: Vec<String> = class
        .warnings
        .iter()
        .map(|w| {
            w.to_string()
                .replace(&format!("{}/", dir.path().display()), "")
        })
        .collect();
    assert_eq!(
        warnings,
        [
            "tv.rhai:26:5: `channel` has more than 16 `@request` lines; search uses the first 16, keep the most different ones",
            "tv.rhai:27:5: `@request` of `channel` is over 200 characters, so search ignores it; write one short sentence a person would say",
        ]
    );
}

#[test]
fn a_function_without_any_doc_comment_is_still_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.rhai");
    std::fs::write(&path, "//! S.\n\nfn run(a) {}\n").unwrap();
    let error = Registry::load_file(&path, &settings()).unwrap_err();
    assert!(error.message.contains("has no summary"), "{error}");
}
