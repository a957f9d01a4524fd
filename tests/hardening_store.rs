//! Issue 14 hardening of the edges a skill file, a sound file and `config show` touch,
//! mostly through the real binary: skill commands do not see the daemon's secrets, a
//! hostile WAV is refused with a clear error, storage stops at its caps, `@remote` marks
//! what other devices may call (tests/mqtt_allow.rs calls them over a real broker).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use strawberry_spoke::host::storage::StorageLimits;
use strawberry_spoke::skills::{Registry, SkillClass};

use crate::support::skill;

struct Spoke {
    skills: tempfile::TempDir,
    data: tempfile::TempDir,
}

impl Spoke {
    fn new() -> Spoke {
        Spoke {
            skills: tempfile::tempdir().unwrap(),
            data: tempfile::tempdir().unwrap(),
        }
    }

    fn with_skill(self, file: &str, text: &str) -> Spoke {
        std::fs::write(self.skills.path().join(file), text).unwrap();
        self
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_strawberry-spoke"));
        cmd.args(args)
            .env("STRAWBERRY_SPOKE__SKILLS__DIR", self.skills.path())
            .env("STRAWBERRY_SPOKE__DEVICE__DATA_DIR", self.data.path())
            .env("STRAWBERRY_SPOKE__DEVICE__NAME", "Test Box")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        cmd
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn succeeded(out: &Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

const ENV_SKILL: &str = r#"//! Shows the environment commands get.

/// The environment of a command, one `NAME=value` per line.
///
/// @return string  The output of `env`.
fn show() {
    let r = command("env", []);
    r.stdout
}

/// The environment of a command given one extra variable.
///
/// @return string  The output of `env`.
fn show_with() {
    let r = command("env", [], #{ env: #{ GIVEN: "by-the-skill" } });
    r.stdout
}
"#;

#[test]
fn skill_commands_do_not_inherit_the_daemons_secrets() {
    let spoke = Spoke::new().with_skill("env.rhai", ENV_SKILL);
    let out = spoke
        .command(&["exec", "-e", "device.EnvSkill.show()"])
        .env("STRAWBERRY_SPOKE__MQTT__PASSWORD", "mqtt-sekrit")
        .env("OPENAI_API_KEY", "sk-sekrit")
        .env("LANG", "C.UTF-8")
        .output()
        .unwrap();
    let env = succeeded(&out);
    assert!(
        !env.contains("sekrit"),
        "secret leaked to a command:\n{env}"
    );
    assert!(!env.contains("STRAWBERRY_SPOKE__"), "{env}");
    let names: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
    assert!(names.contains(&"PATH"), "{env}");
    assert!(env.lines().any(|l| l == "LANG=C.UTF-8"), "{env}");

    let out = spoke
        .command(&["exec", "-e", "device.EnvSkill.show_with()"])
        .output()
        .unwrap();
    let env = succeeded(&out);
    assert!(env.lines().any(|l| l == "GIVEN=by-the-skill"), "{env}");
}

#[test]
fn config_show_masks_secrets_in_endpoint_arrays() {
    let spoke = Spoke::new();
    let config = spoke.data.path().join("config.toml");
    std::fs::write(
        &config,
        r#"
[[hub.endpoints]]
url = "https://bob:hunter2@llm.example/v1"
model = "gemma"
api_key_env = "MY_KEY"
"#,
    )
    .unwrap();
    let out = spoke
        .command(&["--config", config.to_str().unwrap(), "config", "show"])
        .output()
        .unwrap();
    let shown = succeeded(&out);
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(!shown.contains("MY_KEY"), "{shown}");
    assert!(shown.contains("gemma"), "{shown}");
}

/// A 16-bit mono PCM WAV claiming `rate` Hz, holding 32 samples of silence (few, so that
/// code without the check converts it in seconds rather than running out of memory).
fn wav_claiming(path: &Path, rate: u32) {
    let data = vec![0u8; 64];
    let mut b = Vec::new();
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    for part in [
        &16u32.to_le_bytes()[..],
        &1u16.to_le_bytes(),
        &1u16.to_le_bytes(),
    ] {
        b.extend_from_slice(part);
    }
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&(rate * 2).to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(b"data");
    b.extend_from_slice(&(data.len() as u32).to_le_bytes());
    b.extend_from_slice(&data);
    std::fs::write(path, b).unwrap();
}

#[test]
fn a_one_hertz_wav_is_refused_with_a_clear_error_not_an_abort() {
    let spoke = Spoke::new();
    let wav = spoke.data.path().join("one-hertz.wav");
    wav_claiming(&wav, 1);
    let out = spoke
        .command(&["transcribe", wav.to_str().unwrap()])
        // Keep the test independent of whether a speech model is installed: the file
        // must be refused before the model is needed.
        .env(
            "STRAWBERRY_SPOKE__STT__MODEL",
            spoke.data.path().join("no-model.bin"),
        )
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("one-hertz.wav"), "{err}");
    assert!(err.contains("sample rate of 1 Hz"), "{err}");
}

/// Bytes of every file in the skill storage folder.
fn storage_bytes(data: &Path) -> u64 {
    std::fs::read_dir(data.join("skills"))
        .map(|dir| {
            dir.map(|e| e.unwrap().metadata().unwrap().len())
                .sum::<u64>()
        })
        .unwrap_or(0)
}

/// Adds `item` to lists chosen by `list(i)` until an add fails or `most` adds were made;
/// returns the failure and how many adds succeeded.
fn fill_notes(
    notes: &skill::Skill,
    item: &str,
    most: usize,
    list: impl Fn(usize) -> String,
) -> (Option<String>, usize) {
    for i in 0..most {
        if let Err(e) = notes.call("add", (item.to_string(), list(i))) {
            return (Some(e), i);
        }
    }
    (None, most)
}

#[test]
fn filling_notes_stops_at_the_skill_cap_and_the_disk_stays_bounded() {
    let data = tempfile::tempdir().unwrap();
    let notes = skill::Skill::load("notes.rhai", data.path());
    let limits = StorageLimits::default();
    let item = "x".repeat(4000);
    // Forty lists growing together: the skill's total reaches its cap before any one
    // list reaches the per-value cap. Uncapped, this would go on to the last add.
    let most = 3 * limits.max_bytes / item.len();
    let (err, added) = fill_notes(&notes, &item, most, |i| format!("l{}", i % 40));
    let err = err.unwrap_or_else(|| panic!("{most} adds of {} bytes all succeeded", item.len()));
    assert!(err.contains("skills.storage_max_bytes"), "{err}");
    assert!(err.contains("`list:l"), "{err}");
    assert!(added * item.len() <= limits.max_bytes, "{added} adds");
    assert!(
        added * (item.len() + 8) >= limits.max_bytes * 9 / 10,
        "{added} adds"
    );
    let on_disk = storage_bytes(data.path());
    let bound = 2 * limits.max_bytes as u64 + 64 * 1024 + limits.max_value_bytes as u64;
    assert!(on_disk <= bound, "{on_disk} bytes on disk, bound {bound}");
    // What was stored before the cap is all there, also after a restart.
    let again = skill::Skill::load("notes.rhai", data.path());
    let lists = again.ok("lists", ());
    let total: i64 = lists
        .into_array()
        .unwrap()
        .iter()
        .map(|l| skill::field::<i64>(l, "count"))
        .sum();
    assert_eq!(total as usize, added);
}

#[test]
fn one_list_stops_at_the_value_cap_with_the_key_named() {
    let data = tempfile::tempdir().unwrap();
    let notes = skill::Skill::load("notes.rhai", data.path());
    let limits = StorageLimits::default();
    let item = "y".repeat(1000);
    let most = 2 * limits.max_value_bytes / item.len();
    let (err, added) = fill_notes(&notes, &item, most, |_| "shopping".into());
    let err = err.unwrap_or_else(|| panic!("{most} adds to one list all succeeded"));
    assert!(err.contains("`list:shopping`"), "{err}");
    assert!(err.contains("skills.storage_max_value_bytes"), "{err}");
    assert_eq!(
        notes.ok("read", ("shopping",)).into_array().unwrap().len(),
        added
    );
    assert!(storage_bytes(data.path()) <= 2 * limits.max_bytes as u64 + 64 * 1024);
}

/// Loads one skill file written to a temporary folder.
fn load_skill(text: &str) -> Result<SkillClass, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tagged.rhai");
    std::fs::write(&path, text).unwrap();
    Registry::load_file(&path, &skill::quick_settings()).map_err(|e| e.to_string())
}

fn remote_functions(class: &SkillClass) -> Vec<&str> {
    class
        .functions
        .iter()
        .filter(|f| f.remote)
        .map(|f| f.name.as_str())
        .collect()
}

#[test]
fn remote_tags_on_functions_and_classes() {
    let class = load_skill(
        r#"//! Lights.
//!
//! @class Lights

/// Is it on?
///
/// @return bool  Whether the light is on.
/// @remote
fn is_on() { true }

/// Switch it.
///
/// @param on: bool  On or off.
fn set_on(on) { on }
"#,
    )
    .unwrap();
    assert_eq!(remote_functions(&class), ["is_on"]);

    let class = load_skill(
        r#"//! Lights.
//!
//! @class Lights
//! @remote

/// Is it on?
///
/// @return bool  Whether the light is on.
fn is_on() { true }

/// Forget the schedule.
///
/// @confirm
fn forget() { () }

/// Forget the schedule, from anywhere.
///
/// @confirm
/// @remote
fn forget_anywhere() { () }

/// Maintenance.
///
/// @no_model
fn reset() { () }
"#,
    )
    .unwrap();
    // The class mark leaves out what asks first or is not for model code.
    assert_eq!(remote_functions(&class), ["is_on", "forget_anywhere"]);

    let err = load_skill(
        r#"//! Lights.

/// Maintenance.
///
/// @no_model
/// @remote
fn reset() { () }
"#,
    )
    .unwrap_err();
    assert!(err.contains("tagged.rhai:6:5"), "{err}");
    assert!(err.contains("both `@remote` and `@no_model`"), "{err}");
}

#[test]
fn bundled_skills_open_what_is_useful_from_another_room() {
    let (registry, errors) = Registry::load(&skill::skills_dir(), &skill::quick_settings());
    assert!(errors.is_empty(), "{errors:?}");
    let remote = |name: &str| remote_functions(registry.class(name).unwrap());
    assert_eq!(
        remote("ClockSkill"),
        ["now", "day_of_week", "hours_ahead", "time_until"]
    );
    assert_eq!(
        remote("VolumeSkill"),
        ["get", "set", "change", "mute", "unmute"]
    );
    assert_eq!(
        remote("SystemSkill"),
        [
            "hostname",
            "uptime",
            "load",
            "memory",
            "cpu_temperature",
            "summary"
        ]
    );
    assert!(
        remote("NotesSkill").is_empty(),
        "{:?}",
        remote("NotesSkill")
    );

    // `skills list` says what other devices may call.
    let spoke = Spoke::new();
    for file in ["clock.rhai", "notes.rhai"] {
        std::fs::copy(
            skill::skills_dir().join(file),
            spoke.skills.path().join(file),
        )
        .unwrap();
    }
    let listed = succeeded(&spoke.command(&["skills", "list"]).output().unwrap());
    let line = |name: &str| {
        listed
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{name} not in:\n{listed}"))
            .to_string()
    };
    assert!(
        line("now(").contains("[other devices may call]"),
        "{listed}"
    );
    assert!(
        !line("add(").contains("[other devices may call]"),
        "{listed}"
    );
}
