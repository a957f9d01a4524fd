//! Binding arguments to documented signatures: positional, named, defaults, errors.

use std::path::Path;
use std::sync::OnceLock;

use serde_json::json;
use strawberry_spoke::skills::{ArgError, Registry, SkillFunction, bind};

use crate::support::skill;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let settings = skill::quick_settings();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/skills_good");
        let (registry, errors) = Registry::load(&dir, &settings);
        assert!(errors.is_empty(), "{errors:?}");
        registry
    })
}

fn function(name: &str) -> &'static SkillFunction {
    registry().function(name).expect("fixture function")
}

fn bind_err(name: &str, args: serde_json::Value) -> String {
    let args = args.as_array().cloned().expect("an array of arguments");
    match bind(function(name), &args) {
        Ok(bound) => panic!("{name} accepted {args:?} as {bound:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn positional_arguments_fill_defaults() {
    let start = function("TimerSkill.start");
    assert_eq!(
        bind(start, &[json!(300)]),
        Ok(vec![json!(300), json!("timer")])
    );
    assert_eq!(
        bind(start, &[json!(60), json!("tea")]),
        Ok(vec![json!(60), json!("tea")])
    );
    assert_eq!(bind(function("ClockSkill.greet"), &[]), Ok(vec![]));
}

#[test]
fn named_arguments_are_matched_by_name() {
    let start = function("TimerSkill.start");
    assert_eq!(
        bind(start, &[json!({"label": "eggs", "seconds": 240})]),
        Ok(vec![json!(240), json!("eggs")])
    );
    assert_eq!(
        bind(start, &[json!({"seconds": 5})]),
        Ok(vec![json!(5), json!("timer")])
    );
    let volume = function("VolumeSkill.set_volume");
    assert_eq!(
        bind(volume, &[json!({"step": 2, "level": 30})]),
        Ok(vec![json!(30), json!(2)])
    );
}

#[test]
fn an_object_for_a_map_parameter_is_positional_unless_its_keys_are_parameters() {
    let echo = function("SystemInfoSkill.echo");
    let options = json!({"verbose": true});
    assert_eq!(
        bind(echo, std::slice::from_ref(&options)),
        Ok(vec![options.clone(), json!(null)])
    );
    assert_eq!(
        bind(echo, &[json!({})]),
        Ok(vec![json!({}), json!(null)]),
        "an empty object is the map itself"
    );
    assert_eq!(
        bind(echo, &[json!({"options": {"a": 1}, "extra": 2})]),
        Ok(vec![json!({"a": 1}), json!(2)]),
        "every key names a parameter: named"
    );
}

#[test]
fn float_parameters_accept_ints_and_receive_floats() {
    let louder = function("VolumeSkill.louder");
    let bound = bind(louder, &[json!(3)]).expect("int for float");
    assert!(bound[0].is_f64(), "{bound:?}");
    assert_eq!(bound[0].as_f64(), Some(3.0));
    assert_eq!(bind(louder, &[]).map(|b| b[0].as_f64()), Ok(Some(10.0)));
}

#[test]
fn mismatches_name_the_signature_and_the_argument() {
    assert_eq!(
        bind_err("VolumeSkill.set_volume", json!(["loud"])),
        "VolumeSkill.set_volume expects set_volume(level: int, step: int = 5) -> (): argument 1 `level` must be int, got string \"loud\""
    );
    assert_eq!(
        bind_err("VolumeSkill.set_volume", json!([1.5])),
        "VolumeSkill.set_volume expects set_volume(level: int, step: int = 5) -> (): argument 1 `level` must be int, got float 1.5"
    );
    assert_eq!(
        bind_err("VolumeSkill.set_volume", json!([])),
        "VolumeSkill.set_volume expects set_volume(level: int, step: int = 5) -> (): argument 1 `level` is missing"
    );
    assert_eq!(
        bind_err("VolumeSkill.set_volume", json!([1, 2, 3])),
        "VolumeSkill.set_volume expects set_volume(level: int, step: int = 5) -> (): got 3 arguments, it takes at most 2"
    );
    assert_eq!(
        bind_err("VolumeSkill.set_volume", json!([{"levle": 3}])),
        "VolumeSkill.set_volume expects set_volume(level: int, step: int = 5) -> (): it has no parameter `levle`; did you mean `level`?"
    );
    assert_eq!(
        bind_err("VolumeSkill.set_volume", json!([{"step": 3}])),
        "VolumeSkill.set_volume expects set_volume(level: int, step: int = 5) -> (): argument 1 `level` is missing"
    );
    assert_eq!(
        bind_err("TimerSkill.start", json!([10, null])),
        "TimerSkill.start expects start(seconds: int, label: string = \"timer\") -> string: argument 2 `label` must be string, got ()"
    );
    let long = "x".repeat(100);
    let shown = bind_err("VolumeSkill.set_volume", json!([long]));
    assert!(
        shown.ends_with(&format!("got string \"{}...", "x".repeat(36))),
        "{shown}"
    );
}

#[test]
fn any_accepts_everything_and_unit_defaults_accept_null() {
    let echo = function("SystemInfoSkill.echo");
    for extra in [
        json!(1),
        json!("s"),
        json!([1]),
        json!(null),
        json!({"k": [true]}),
    ] {
        assert_eq!(
            bind(echo, &[json!({}), extra.clone()]),
            Ok(vec![json!({}), extra])
        );
    }
    assert!(matches!(
        bind(echo, &[json!([1])]),
        Err(ArgError::WrongType { position: 1, .. })
    ));
}
