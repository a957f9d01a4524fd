//! Issue 14 hardening of the edges a skill file, a sound file and `config show` touch,
//! through the real binary: skill commands do not see the daemon's secrets, a hostile WAV
//! is refused with a clear error, storage stops at its caps.

use std::path::Path;
use std::process::{Command, Output, Stdio};

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
