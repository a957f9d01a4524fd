//! Who may call what from another device, against a real mosquitto: with the default
//! `mqtt.remote_allow` (empty) only functions marked `@remote` are registered and
//! callable; a broker client calling anything else gets a clear refusal and nothing runs;
//! `remote_allow` entries open more.

mod mosquitto;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mosquitto::Broker;
use serde_json::{Value, json};

/// One function open to other devices, one not.
const THERMO: &str = r#"//! A thermostat.
//!
//! @class Thermo

/// The room temperature.
///
/// @return float  Degrees Celsius.
/// @remote
fn read() {
    21.5
}

/// Remember a text for later.
///
/// @param text: string  What to remember.
/// @return string  What was stored.
fn plant(text) {
    storage_set("planted", text);
    text
}
"#;

/// A spoke folder using the bundled clock and notes skills and [`THERMO`].
struct Spoke {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Spoke {
    fn serve(broker: &Broker, id: &str, extra: &str) -> Spoke {
        let dir = tempfile::tempdir().unwrap();
        let skills = dir.path().join("skills");
        std::fs::create_dir(&skills).unwrap();
        let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
        for file in ["clock.rhai", "notes.rhai"] {
            std::fs::copy(bundled.join(file), skills.join(file)).unwrap();
        }
        std::fs::write(skills.join("thermo.rhai"), THERMO).unwrap();
        let config = format!(
            "[device]\nname = \"{id}\"\ndata_dir = \"data\"\n\n[skills]\ndir = \"skills\"\n\n\
             [mqtt]\nbroker = \"{}\"\ndevice_id = \"{id}\"\n{extra}\n",
            broker.url()
        );
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_strawberry-spoke"))
            .arg("--config")
            .arg(dir.path().join("config.toml"))
            .arg("serve")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Spoke {
            dir,
            child: Some(child),
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }
}

impl Drop for Spoke {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The registered functions of device `id`, once all three classes loaded.
fn registered(broker: &Broker, id: &str) -> Vec<String> {
    let text = broker.wait_retained(
        &format!("strawberry/devices/{id}/skills"),
        Duration::from_secs(10),
        |t| serde_json::from_str::<Value>(t).is_ok(),
    );
    let registration: Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    for class in registration["classes"].as_array().unwrap() {
        for f in class["functions"].as_array().unwrap() {
            out.push(format!(
                "{}.{}",
                class["name"].as_str().unwrap(),
                f["name"].as_str().unwrap()
            ));
        }
    }
    out.sort();
    out
}

/// Calls `Class.function(args)` on device `id` as a bare broker client; the answer.
fn call(
    broker: &Broker,
    spoke: &Spoke,
    id: &str,
    class: &str,
    function: &str,
    args: Value,
) -> Value {
    let payload = json!({"class": class, "function": function, "args": args, "from": "intruder"});
    let answer = broker
        .request(
            &format!("strawberry/devices/{id}/rpc"),
            payload.to_string().as_bytes(),
            "strawberry/test/replies",
            &["-D", "publish", "correlation-data", "c1"],
        )
        .unwrap_or_else(|| panic!("no answer to {class}.{function}\n{}", spoke.log()));
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

fn refused(answer: &Value, qualified: &str) {
    assert_eq!(answer["ok"], false, "{answer}");
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(error.contains(qualified), "{error}");
    assert!(error.contains("not open to other devices"), "{error}");
    assert!(
        error.contains("@remote") && error.contains("mqtt.remote_allow"),
        "{error}"
    );
}

#[test]
fn by_default_only_remote_functions_are_open() {
    let broker = Broker::start();
    let spoke = Spoke::serve(&broker, "kitchen", "");
    let functions = registered(&broker, "kitchen");
    // Notes store and reveal what they are given: not open to any broker client.
    assert!(
        !functions.iter().any(|f| f.starts_with("NotesSkill.")),
        "{functions:?}"
    );
    let answer = call(
        &broker,
        &spoke,
        "kitchen",
        "NotesSkill",
        "add",
        json!(["spam", "shopping"]),
    );
    refused(&answer, "NotesSkill.add");
    let answer = call(
        &broker,
        &spoke,
        "kitchen",
        "NotesSkill",
        "read",
        json!(["shopping"]),
    );
    refused(&answer, "NotesSkill.read");

    assert!(
        functions.contains(&"Thermo.read".to_string()),
        "{functions:?}"
    );
    assert!(
        functions.contains(&"ClockSkill.now".to_string()),
        "{functions:?}"
    );
    assert!(
        !functions.contains(&"Thermo.plant".to_string()),
        "{functions:?}"
    );
    let answer = call(&broker, &spoke, "kitchen", "Thermo", "read", json!([]));
    assert_eq!(answer, json!({"ok": true, "result": 21.5}));
    let answer = call(
        &broker,
        &spoke,
        "kitchen",
        "ClockSkill",
        "day_of_week",
        json!([]),
    );
    assert_eq!(answer["ok"], true, "{answer}");
    let answer = call(
        &broker,
        &spoke,
        "kitchen",
        "Thermo",
        "plant",
        json!(["ignore all rules"]),
    );
    refused(&answer, "Thermo.plant");
    // Nothing ran: neither skill stored anything.
    let stored = std::fs::read_dir(spoke.data().join("skills"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(stored, 0, "storage written by a refused call");
}

#[test]
fn remote_allow_entries_open_more() {
    let broker = Broker::start();
    let spoke = Spoke::serve(
        &broker,
        "hall",
        "remote_allow = [\"NotesSkill.read\", \"Thermo\"]",
    );
    let functions = registered(&broker, "hall");
    for open in [
        "NotesSkill.read",
        "Thermo.plant",
        "Thermo.read",
        "ClockSkill.now",
    ] {
        assert!(
            functions.contains(&open.to_string()),
            "{open}: {functions:?}"
        );
    }
    assert!(
        !functions.contains(&"NotesSkill.add".to_string()),
        "{functions:?}"
    );

    let answer = call(
        &broker,
        &spoke,
        "hall",
        "NotesSkill",
        "read",
        json!(["shopping"]),
    );
    assert_eq!(answer, json!({"ok": true, "result": []}));
    let answer = call(&broker, &spoke, "hall", "Thermo", "plant", json!(["hello"]));
    assert_eq!(answer, json!({"ok": true, "result": "hello"}));
    let answer = call(
        &broker,
        &spoke,
        "hall",
        "NotesSkill",
        "add",
        json!(["spam"]),
    );
    refused(&answer, "NotesSkill.add");
}
