//! Who may call what from another device, against a real mosquitto: with the default
//! `mqtt.remote_allow` (empty) only functions marked `@remote` are registered and
//! callable; a broker client calling anything else gets a clear refusal and nothing runs;
//! `remote_allow` entries open more. A `@confirm` function, opened explicitly, runs only
//! for a caller that asked its own user (`"confirmed": true`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use strawberry_spoke::config::Config;
use strawberry_spoke::device::Device;
use strawberry_spoke::host::HostSettings;
use strawberry_spoke::mqtt::{Link, Role};
use strawberry_spoke::sandbox::{DeviceHandler, DeviceRequest};
use strawberry_spoke::skills::Registry;
use strawberry_spoke::skills::policy::{Asking, Confirm};

use crate::support::mosquitto::Broker;
use crate::support::poll;

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

/// Two `@confirm` functions: one opened to other devices, one not.
const DOOR: &str = r#"//! The porch door.
//!
//! @class Door

/// Unlocks the porch door.
///
/// @return string  What happened.
/// @confirm
/// @remote
fn unlock() {
    storage_set("unlocked", true);
    "unlocked"
}

/// Locks the porch door.
///
/// @return string  What happened.
/// @confirm
fn lock() {
    storage_set("locked", true);
    "locked"
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
    send(broker, spoke, id, payload)
}

/// Publishes the call `payload` to device `id`; the answer.
fn send(broker: &Broker, spoke: &Spoke, id: &str, payload: Value) -> Value {
    let (class, function) = (&payload["class"], &payload["function"]);
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

/// The keys the skill `class` stored on `spoke`, from its storage journal.
fn stored(spoke: &Spoke, class: &str) -> String {
    std::fs::read_to_string(spoke.data().join(format!("skills/{class}.jsonl"))).unwrap_or_default()
}

/// The person at a calling device: answers `yes` and remembers what was asked.
struct Person {
    yes: bool,
    asked: Mutex<Vec<Asking>>,
}

impl Confirm for Person {
    fn confirm(&self, asking: &Asking) -> bool {
        self.asked.lock().unwrap().push(asking.clone());
        self.yes
    }
}

/// A calling device in this process whose person answers `yes`, with the link it uses.
fn caller(rt: &tokio::runtime::Runtime, broker: &Broker, yes: bool) -> (Link, Device, Arc<Person>) {
    let mut config = Config::default();
    config.mqtt.broker = broker.url();
    config.mqtt.device_id = "hall".into();
    let settings = config.link_settings().unwrap().unwrap();
    let link = rt.block_on(async {
        let link = Link::start(settings, Role::Caller);
        assert!(
            link.wait_ready(Duration::from_secs(10)).await,
            "never connected"
        );
        link
    });
    let person = Arc::new(Person {
        yes,
        asked: Mutex::new(Vec::new()),
    });
    let registry = Arc::new(Registry::new(Vec::new(), HostSettings::default()));
    let device = Device::new("Hall", registry, person.clone()).with_link(link.clone());
    (link, device, person)
}

#[test]
fn confirm_functions_run_only_for_callers_that_confirmed_with_their_user() {
    let broker = Broker::start();
    let spoke = Spoke::serve(&broker, "porch", "");
    std::fs::write(spoke.dir.path().join("skills/door.rhai"), DOOR).unwrap();
    let text = broker.wait_retained(
        "strawberry/devices/porch/skills",
        Duration::from_secs(10),
        |t| t.contains("\"Door\""),
    );
    let registration: Value = serde_json::from_str(&text).unwrap();
    let door = registration["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "Door")
        .unwrap();
    // Only the function marked @remote is open; it says it needs confirming.
    assert_eq!(door["functions"].as_array().unwrap().len(), 1, "{door}");
    assert_eq!(door["functions"][0]["name"], "unlock");
    assert_eq!(door["functions"][0]["confirm"], true);

    // A caller that did not confirm: refused (`serve` has no terminal to ask on), nothing ran.
    let answer = call(&broker, &spoke, "porch", "Door", "unlock", json!([]));
    assert_eq!(answer["ok"], false, "{answer}");
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("did not allow Door.unlock()") && error.contains("\"confirmed\": true"),
        "{error}"
    );
    assert_eq!(stored(&spoke, "Door"), "");
    // Confirming does not open what is not open to other devices.
    let answer = send(
        &broker,
        &spoke,
        "porch",
        json!({"class": "Door", "function": "lock", "args": [], "from": "Hall", "confirmed": true}),
    );
    refused(&answer, "Door.lock");
    assert_eq!(stored(&spoke, "Door"), "");

    // A device whose person says no: asked there, not sent, nothing ran.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let unlock = || DeviceRequest::Call {
        device: Some("porch".into()),
        class: "Door".into(),
        function: "unlock".into(),
        args: vec![],
    };
    let (link, device, person) = caller(&rt, &broker, false);
    poll_peer(&link);
    let error = device.handle(unlock()).unwrap_err();
    assert_eq!(error, "the user said no to Door.unlock() on porch");
    assert_eq!(
        person.asked.lock().unwrap()[0].question,
        "Shall I unlock the porch door, on porch?"
    );
    assert_eq!(stored(&spoke, "Door"), "");
    rt.block_on(link.shutdown());

    // A device whose person says yes: the yes travels with the call, and it runs.
    let (link, device, person) = caller(&rt, &broker, true);
    poll_peer(&link);
    assert_eq!(device.handle(unlock()), Ok(json!("unlocked")));
    assert_eq!(person.asked.lock().unwrap().len(), 1);
    assert!(stored(&spoke, "Door").contains("unlocked"));
    rt.block_on(link.shutdown());
}

/// Waits until the caller knows the porch's registration.
fn poll_peer(link: &Link) {
    poll::wait_until("the porch registration", Duration::from_secs(10), || {
        link.with_peers(|peers| {
            peers
                .all()
                .any(|p| p.online && p.function("Door", "unlock").is_some())
        })
    });
}
