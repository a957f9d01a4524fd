//! Calling skill functions: results as JSON, timeouts, errors with positions.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use strawberry_spoke::host::HostSettings;
use strawberry_spoke::skills::{CallError, Registry};

fn settings(call_timeout: Duration) -> HostSettings {
    HostSettings {
        data_dir: std::env::temp_dir(),
        call_timeout,
        command_timeout: Duration::from_secs(1),
        http_timeout: Duration::from_secs(1),
        http_max_bytes: 1 << 20,
        file_max_bytes: 1 << 20,
        ..HostSettings::default()
    }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/skills_good")
}

fn registry(call_timeout: Duration) -> Registry {
    let (registry, errors) = Registry::load(&fixtures(), &settings(call_timeout));
    assert!(errors.is_empty(), "{errors:?}");
    registry
}

fn failure(registry: &Registry, class: &str, function: &str, args: &[serde_json::Value]) -> String {
    match registry.call(class, function, args) {
        Ok(value) => panic!("{class}.{function} returned {value}"),
        Err(e) => e
            .to_string()
            .replace(&format!("{}/", fixtures().display()), ""),
    }
}

#[test]
fn calls_return_json_with_defaults_and_named_arguments() {
    let registry = registry(Duration::from_secs(2));
    assert_eq!(
        registry.call("TimerSkill", "start", &[json!(300)]),
        Ok(json!("timer: 300 s"))
    );
    assert_eq!(
        registry.call(
            "TimerSkill",
            "start",
            &[json!({"seconds": 5, "label": "tea"})]
        ),
        Ok(json!("tea: 5 s"))
    );
    assert_eq!(registry.call("TimerSkill", "remaining", &[]), Ok(json!(42)));
    assert_eq!(
        registry.call("TimerSkill", "clear_all", &[]),
        Ok(json!(null))
    );
    assert_eq!(
        registry.call("MusicSkill", "play", &[json!("Abba")]),
        Ok(json!({"title": "Abba", "shuffle": false, "position": 0.5}))
    );
    assert_eq!(
        registry.call("ClockSkill", "greet", &[]),
        Ok(json!("HELLO"))
    );
    let louder = registry
        .call("VolumeSkill", "louder", &[json!(3)])
        .expect("louder");
    assert!(
        louder.is_f64(),
        "an int passed for a float arrives as a float: {louder}"
    );
    let nested = json!({"list": [1, 2.5, "x", null, {"deep": true}]});
    assert_eq!(
        registry.call("SystemInfoSkill", "echo", &[nested.clone(), json!([7])]),
        Ok(json!([nested, [7]]))
    );
}

#[test]
fn an_endless_loop_is_stopped_at_the_call_timeout() {
    let timeout = Duration::from_millis(300);
    let registry = registry(timeout);
    let started = Instant::now();
    let result = registry.call("CallsSkill", "spin", &[]);
    let took = started.elapsed();
    assert_eq!(
        result,
        Err(CallError::Timeout {
            function: "CallsSkill.spin".to_string(),
            after: timeout
        })
    );
    assert!(took >= timeout, "stopped early: {took:?}");
    assert!(
        took < timeout + Duration::from_millis(100),
        "stopped late: {took:?}"
    );
    // The deadline belongs to that call only: the next one runs normally.
    assert_eq!(
        registry.call("ClockSkill", "greet", &[]),
        Ok(json!("HELLO"))
    );
}

#[test]
fn errors_from_skill_code_carry_their_position() {
    let registry = registry(Duration::from_secs(2));
    assert_eq!(
        failure(&registry, "CallsSkill", "fail", &[json!("disk full")]),
        "calls.rhai:12:5: skill threw: disk full"
    );
    let bounds = failure(&registry, "CallsSkill", "out_of_bounds", &[]);
    assert!(bounds.starts_with("calls.rhai:18:7: "), "{bounds}");
    assert!(bounds.contains("out of bounds"), "{bounds}");
    let nested = failure(&registry, "CallsSkill", "nested", &[]);
    assert!(
        nested.starts_with("calls.rhai:32:"),
        "points inside the helper: {nested}"
    );
    assert_eq!(
        failure(&registry, "CallsSkill", "pointer", &[]),
        "calls.rhai:22: CallsSkill.pointer returned a function pointer, which cannot be sent as JSON; return numbers, strings, bools, arrays, maps or ()"
    );
}

#[test]
fn unknown_names_and_bad_arguments_fail_before_the_skill_runs() {
    let registry = registry(Duration::from_secs(2));
    assert_eq!(
        failure(&registry, "TimerSkil", "start", &[]),
        "no skill class `TimerSkil`; did you mean `TimerSkill`?"
    );
    assert_eq!(
        failure(&registry, "TimerSkill", "stop", &[]),
        "TimerSkill has no function `stop` (it has `start`, `remaining`, `clear_all`)"
    );
    assert_eq!(
        failure(&registry, "TimerSkill", "strat", &[]),
        "TimerSkill has no function `strat` (it has `start`, `remaining`, `clear_all`); did you mean `start`?"
    );
    assert_eq!(
        failure(
            &registry,
            "TimerSkill",
            "_describe",
            &[json!(1), json!("x")]
        ),
        "TimerSkill has no function `_describe` (it has `start`, `remaining`, `clear_all`)"
    );
    assert!(matches!(
        registry.call("TimerSkill", "start", &[json!("soon")]),
        Err(CallError::Arguments(_))
    ));
}
