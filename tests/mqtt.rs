//! The MQTT link against a real mosquitto: registration and presence as other tools
//! see them, last will, calls between real spoke processes, broker restarts, password
//! and TLS, hostile payloads on the call topic, skill hot reload, and every online
//! room's skills in the prompt.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::mosquitto::{Broker, Options};
use crate::support::{cpu, llm};

const GREETER: &str = r#"//! Greets people by name.
//!
//! @class Greeter

/// Say hello to someone.
///
/// @param name: string  Who to greet.
/// @return string  The greeting.
fn hello(name) {
    `Hello, ${name}!`
}

/// Forget everything.
///
/// @confirm
fn forget() {
    "forgotten"
}

/// Something only a person may run.
///
/// @no_model
fn reset() {
    "reset"
}

/// Never returns.
fn spin() {
    loop {}
}
"#;

fn tv_skill(tag: &str) -> String {
    format!(
        r#"//! The television's volume.
//!
//! @class TvSkill

/// Set the TV volume.
///
/// @param level: int  0 to 100.
/// @return string  What was done.
fn set_volume(level) {{
    `{tag}:${{level}}`
}}
"#
    )
}

/// The same skill on several devices: says where it ran.
fn where_skill(place: &str) -> String {
    format!(
        r#"//! Says which device ran it.
//!
//! @class WhereSkill

/// Where am I?
///
/// @return string  The device.
fn where_am_i() {{
    "{place}"
}}
"#
    )
}

/// A spoke's folder: config, skills, data, log. Its config opens every skill function
/// to other devices (`remote_allow = ["*"]`): these tests are about the link, and
/// tests/mqtt_allow.rs about what is open by default.
struct SpokeDir {
    dir: tempfile::TempDir,
}

impl SpokeDir {
    fn new(name: &str, id: &str, broker: &str, extra: &str) -> SpokeDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("skills")).unwrap();
        let config = format!(
            "[device]\nname = \"{name}\"\ndata_dir = \"data\"\n\n[skills]\ndir = \"skills\"\ncall_timeout_ms = 500\n\n\
             [mqtt]\nbroker = \"{broker}\"\ndevice_id = \"{id}\"\ncall_timeout_ms = 3000\n\
             remote_allow = [\"*\"]\n{extra}\n"
        );
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        SpokeDir { dir }
    }

    fn skill(&self, file: &str, text: &str) -> &Self {
        let path = self.dir.path().join("skills").join(file);
        // Write then rename, as editors do, so the watcher never sees half a file.
        let tmp = self.dir.path().join(format!("{file}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
        self
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_strawberry-spoke"));
        cmd.arg("--config")
            .arg(self.config())
            .args(args)
            .env_remove("RUST_LOG")
            .env("STRAWBERRY_SPOKE__LOG__LEVEL", "info")
            .stdin(Stdio::null());
        cmd
    }

    /// `serve` in the background, logging to `serve.log`.
    fn serve(&self) -> Daemon {
        let log = std::fs::File::create(self.dir.path().join("serve.log")).unwrap();
        let child = self
            .command(&["serve"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Daemon {
            child: Some(child),
            log: self.dir.path().join("serve.log"),
        }
    }

    /// `exec -e CODE`: (exit code, stdout, stderr).
    fn exec(&self, code: &str) -> (i32, String, String) {
        let out = self.command(&["exec", "-e", code]).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }
}

/// A `serve` process, killed when dropped.
struct Daemon {
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        // SAFETY: sending a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        child.wait().unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn registration(broker: &Broker, id: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let text = broker.wait_retained(
        &format!("strawberry/devices/{id}/skills"),
        Duration::from_secs(10),
        |t| serde_json::from_str::<Value>(t).is_ok_and(|v| ok(&v)),
    );
    serde_json::from_str(&text).unwrap()
}

fn functions(registration: &Value) -> Vec<String> {
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
    out
}

fn wait_online(broker: &Broker, id: &str) {
    broker.wait_retained(
        &format!("strawberry/devices/{id}/status"),
        Duration::from_secs(10),
        |t| t == "online",
    );
}

#[test]
fn registration_presence_last_will_and_clean_shutdown() {
    let broker = Broker::start();
    let kitchen = SpokeDir::new("Kitchen", "kitchen", &broker.url(), "");
    kitchen.skill("greeter.rhai", GREETER);
    let mut daemon = kitchen.serve();
    wait_online(&broker, "kitchen");
    let reg = registration(&broker, "kitchen", |_| true);
    assert_eq!(reg["schema"], 1);
    assert_eq!(reg["device_id"], "kitchen");
    assert_eq!(reg["name"], "Kitchen");
    // `*` exports what needs no confirmation; @no_model is never exported.
    assert_eq!(functions(&reg), vec!["Greeter.hello", "Greeter.spin"]);
    let hello = &reg["classes"][0]["functions"][0];
    assert_eq!(hello["signature"], "hello(name: string) -> string");
    assert_eq!(hello["params"][0]["type"], "string");

    daemon.kill9();
    broker.wait_retained(
        "strawberry/devices/kitchen/status",
        Duration::from_secs(10),
        |t| t == "offline",
    );

    // A clean stop (SIGTERM) publishes `offline` itself and exits 0.
    let mut daemon = kitchen.serve();
    wait_online(&broker, "kitchen");
    let status = daemon.terminate();
    assert!(status.success(), "{status:?}\n{}", daemon.log());
    assert_eq!(
        broker
            .retained("strawberry/devices/kitchen/status", &[])
            .as_deref(),
        Some("offline")
    );
    assert!(daemon.log().contains("SIGTERM"), "{}", daemon.log());
}

#[test]
fn serve_reloads_its_configuration_on_sighup() {
    let broker = Broker::start();
    let kitchen = SpokeDir::new("Kitchen", "kitchen", &broker.url(), "");
    kitchen.skill("greeter.rhai", GREETER);
    let mut daemon = kitchen.serve();
    wait_online(&broker, "kitchen");
    registration(&broker, "kitchen", |r| r["name"] == "Kitchen");
    let config = std::fs::read_to_string(kitchen.config()).unwrap();
    std::fs::write(
        kitchen.config(),
        config.replace("name = \"Kitchen\"", "name = \"Pantry\""),
    )
    .unwrap();
    let pid = i32::try_from(daemon.child.as_ref().unwrap().id()).unwrap();
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    // Restarted with the new file: registered again under the new name, still serving.
    let reg = registration(&broker, "kitchen", |r| r["name"] == "Pantry");
    assert_eq!(functions(&reg), vec!["Greeter.hello", "Greeter.spin"]);
    wait_online(&broker, "kitchen");
    let status = daemon.terminate();
    assert!(status.success(), "{status:?}\n{}", daemon.log());
}

#[test]
fn local_mode_is_announced() {
    let dir = SpokeDir::new("Box", "box", "", "");
    let mut daemon = dir.serve();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemon.log().contains("local mode") {
        assert!(Instant::now() < deadline, "{}", daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(daemon.terminate().success());
    assert_eq!(daemon.log().matches("local mode").count(), 1);
}

#[test]
fn spokes_call_each_other_with_ambiguous_and_offline_cases() {
    let broker = Broker::start();
    let kitchen = SpokeDir::new("Kitchen", "kitchen", &broker.url(), "");
    kitchen.skill("greeter.rhai", GREETER);
    kitchen.skill("where.rhai", &where_skill("kitchen"));
    let tv = SpokeDir::new("Living Room TV", "tv1", &broker.url(), "");
    tv.skill("tv.rhai", &tv_skill("tv"));
    tv.skill("where.rhai", &where_skill("tv"));
    let _k = kitchen.serve();
    let mut tv_daemon = tv.serve();
    registration(&broker, "kitchen", |_| true);
    registration(&broker, "tv1", |_| true);
    wait_online(&broker, "kitchen");
    wait_online(&broker, "tv1");

    // Each calls the other's skill.
    let (code, out, err) = kitchen.exec("device.TvSkill.set_volume(30)");
    assert_eq!((code, out.as_str()), (0, "tv:30"), "{err}");
    let (code, out, err) = tv.exec(r#"device.Greeter.hello("TV")"#);
    assert_eq!((code, out.as_str()), (0, "Hello, TV!"), "{err}");
    // Named arguments and argument checks work across devices too.
    let (code, out, err) = kitchen.exec("device.TvSkill.set_volume(#{level: 7})");
    assert_eq!((code, out.as_str()), (0, "tv:7"), "{err}");
    let (code, _, err) = kitchen.exec(r#"device.TvSkill.set_volume("loud")"#);
    assert_eq!(code, 2);
    assert!(err.contains("set_volume(level: int)"), "{err}");

    // A skill both host runs here when this device has it.
    let (_, out, err) = kitchen.exec("device.WhereSkill.where_am_i()");
    assert_eq!(out, "kitchen", "{err}");
    // From a third device that has it not: ambiguous, naming both and the explicit form.
    let hall = SpokeDir::new("Hall", "hall", &broker.url(), "");
    let (code, _, err) = hall.exec("device.WhereSkill.where_am_i()");
    assert_eq!(code, 2);
    assert!(
        err.contains("`kitchen`") && err.contains("`living-room-tv`") && err.contains("devices[\""),
        "{err}"
    );
    let (code, out, err) = hall.exec(r#"devices["living-room-tv"].WhereSkill.where_am_i()"#);
    assert_eq!((code, out.as_str()), (0, "tv"), "{err}");

    // Search lists one entry per skill with its devices, this device first.
    let (code, out, err) = kitchen.exec(
        r#"let s = device.search_skills("where"); s[0].name + "|" + s[0].devices[0] + "|" + s[0].devices[1] + "|" + s[0].devices.len()"#,
    );
    assert_eq!(
        (code, out.as_str()),
        (0, "WhereSkill.where_am_i|Kitchen|Living Room TV|2"),
        "{err}"
    );
    let (_, out, err) = hall.exec(
        r#"let a = device.search_skills("").map(|s| s.name + "@" + s.devices.len()); a.sort(); a"#,
    );
    assert!(
        out.contains("TvSkill.set_volume@1") && out.contains("WhereSkill.where_am_i@2"),
        "{out}{err}"
    );
    assert!(!out.contains("forget"), "{out}");

    // Unknown device.
    let (code, _, err) = hall.exec(r#"devices["garage"].TvSkill.set_volume(1)"#);
    assert_eq!(code, 2);
    assert!(
        err.contains("no device named `garage`") && err.contains("living-room-tv"),
        "{err}"
    );

    // The TV goes away: calls to it fail at once, naming it offline.
    tv_daemon.kill9();
    broker.wait_retained(
        "strawberry/devices/tv1/status",
        Duration::from_secs(10),
        |t| t == "offline",
    );
    let started = Instant::now();
    let (code, _, err) = kitchen.exec("device.TvSkill.set_volume(30)");
    assert_eq!(code, 2);
    assert!(
        err.contains("living-room-tv") && err.contains("offline"),
        "{err}"
    );
    let (code, _, err) = kitchen.exec(r#"devices["Living Room TV"].TvSkill.set_volume(30)"#);
    assert_eq!(code, 2);
    assert!(err.contains("offline"), "{err}");
    // Not a wait for the 3 s call timeout.
    assert!(started.elapsed() < Duration::from_secs(6));
    // With the TV gone the shared skill is no longer ambiguous.
    let (code, out, err) = hall.exec("device.WhereSkill.where_am_i()");
    assert_eq!((code, out.as_str()), (0, "kitchen"), "{err}");
}

/// The conversation loop reaches skills on other spokes: `ask` on a device without the
/// skill runs the model's code against the TV's skill over MQTT and feeds the result
/// back to the model.
#[test]
fn ask_calls_a_skill_on_another_spoke() {
    let broker = Broker::start();
    let tv = SpokeDir::new("Living Room TV", "tv1", &broker.url(), "");
    tv.skill("tv.rhai", &tv_skill("tv"));
    let _tv = tv.serve();
    registration(&broker, "tv1", |_| true);
    wait_online(&broker, "tv1");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(llm::ScriptedServer::start(vec![
        llm::Reply::Chunks(llm::text_reply(&[
            "Turning it up.\n```rh",
            "ai\ndevice.TvSkill.set_volume(30)\n``",
            "`\n",
        ])),
        llm::Reply::Chunks(llm::text_reply(&["The TV is at 30 now."])),
    ]));
    let kitchen = SpokeDir::new(
        "Kitchen",
        "kitchen",
        &broker.url(),
        &format!(
            "\n[hub]\nendpoints = [{{ url = \"{}\", model = \"test\" }}]\n",
            server.url
        ),
    );
    let out = kitchen
        .command(&["ask", "turn", "up", "the", "TV"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let said = stdout.find("Turning it up.").expect("first sentence");
    let result = stdout.find("tv:30").expect("the remote result");
    let answer = stdout.find("The TV is at 30 now.").expect("final answer");
    assert!(said < result && result < answer, "{stdout}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let feedback = requests[1]["messages"].to_string();
    assert!(feedback.contains("tv:30"), "{feedback}");
}

#[test]
fn broker_restart_brings_registrations_and_calls_back() {
    let mut broker = Broker::start();
    let tv = SpokeDir::new("TV", "tv1", &broker.url(), "");
    tv.skill("tv.rhai", &tv_skill("tv"));
    let _daemon = tv.serve();
    registration(&broker, "tv1", |_| true);

    // An in-process caller, calling all the time.
    let mut config = strawberry_spoke::config::Config::default();
    config.mqtt.broker = broker.url();
    config.mqtt.device_id = "caller".into();
    config.mqtt.call_timeout_ms = 1500;
    let settings = config.link_settings().unwrap().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let link = rt.block_on(async {
        let link =
            strawberry_spoke::mqtt::Link::start(settings, strawberry_spoke::mqtt::Role::Caller);
        assert!(link.wait_ready(Duration::from_secs(5)).await);
        link
    });
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let caller = {
        let link = link.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut log = Vec::new();
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let t = Instant::now();
                let outcome =
                    link.call_blocking("tv1", "TV", "TvSkill", "set_volume", &[Value::from(n)]);
                log.push((Instant::now(), t.elapsed(), n, outcome));
                std::thread::sleep(Duration::from_millis(20));
            }
            log
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    broker.kill();
    std::thread::sleep(Duration::from_millis(300));
    broker.restart();
    let restarted = Instant::now();
    // No persistence: the registration is back only because the spoke republished it.
    registration(&broker, "tv1", |_| true);
    wait_online(&broker, "tv1");
    let back = restarted.elapsed();
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let log = caller.join().unwrap();
    rt.block_on(link.shutdown());

    assert!(
        back < Duration::from_secs(2),
        "registration back after {back:?}"
    );
    // Every call ended, within the call timeout (plus scheduling slack).
    for (_, took, n, outcome) in &log {
        assert!(
            *took < Duration::from_millis(2500),
            "call {n} took {took:?}: {outcome:?}"
        );
        if let Ok(v) = outcome {
            assert_eq!(v, &Value::from(format!("tv:{n}")));
        }
    }
    let first_ok_after = log
        .iter()
        .find(|(at, _, _, outcome)| *at > restarted && outcome.is_ok())
        .map(|(at, ..)| at.duration_since(restarted));
    assert!(
        first_ok_after.is_some_and(|d| d < Duration::from_secs(2)),
        "calls work again after {first_ok_after:?}"
    );
    assert!(
        log.iter().any(|(_, _, _, o)| o.is_err()),
        "the outage was not seen"
    );
    assert!(log.iter().filter(|(_, _, _, o)| o.is_ok()).count() > 10);
}

#[test]
fn password_and_tls() {
    let broker = Broker::start_with(Options {
        user: Some(("spoke".into(), "s3cret pass".into())),
        tls: true,
        client_certs: false,
    });
    let url = format!("mqtts://localhost:{}", broker.port);
    let ca = broker.ca();
    let good = SpokeDir::new(
        "Kitchen",
        "kitchen",
        &url,
        &format!(
            "username = \"spoke\"\npassword_file = \"pw\"\nca_file = \"{}\"",
            ca.display()
        ),
    );
    std::fs::write(good.dir.path().join("pw"), "s3cret pass\n").unwrap();
    good.skill("greeter.rhai", GREETER);
    let bad = SpokeDir::new(
        "Intruder",
        "intruder",
        &url,
        &format!("username = \"spoke\"\nca_file = \"{}\"", ca.display()),
    );
    let _good = good.serve();
    let mut bad_daemon = bad
        .command(&["serve"])
        .env("STRAWBERRY_SPOKE__MQTT__PASSWORD", "wrong")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(bad.dir.path().join("serve.log")).unwrap())
        .spawn()
        .unwrap();
    let auth = [
        "--cafile",
        ca.to_str().unwrap(),
        "-u",
        "spoke",
        "-P",
        "s3cret pass",
    ];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = broker.retained("strawberry/devices/kitchen/status", &auth);
        if seen.as_deref() == Some("online") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never online over TLS: {}",
            broker.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The wrong password never gets in, and says why.
    let log = bad.dir.path().join("serve.log");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("MQTT connection failed")
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        broker.retained("strawberry/devices/intruder/status", &auth),
        None
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("wrong"), "the password was logged: {text}");
    let _ = bad_daemon.kill();
    let _ = bad_daemon.wait();

    // A remote broker without TLS is refused before anything is sent.
    let insecure = SpokeDir::new("X", "x", "mqtt://192.0.2.1:1883", "");
    let out = insecure.command(&["serve"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("allow_insecure"), "{err}");
}

/// A broker that requires client certificates: the spoke with `client_cert` and
/// `client_key` gets in; one without them is refused and says so.
#[test]
fn client_certificate() {
    let broker = Broker::start_with(Options {
        user: None,
        tls: true,
        client_certs: true,
    });
    let url = format!("mqtts://localhost:{}", broker.port);
    let d = broker.dir.path().display();
    let good = SpokeDir::new(
        "Kitchen",
        "kitchen",
        &url,
        &format!(
            "ca_file = \"{d}/ca.pem\"\nclient_cert = \"{d}/client.pem\"\nclient_key = \"{d}/client.key\""
        ),
    );
    good.skill("greeter.rhai", GREETER);
    let bad = SpokeDir::new(
        "Intruder",
        "intruder",
        &url,
        &format!("ca_file = \"{d}/ca.pem\""),
    );
    let _good = good.serve();
    let mut bad_daemon = bad.serve();
    let auth = [
        "--cafile",
        &format!("{d}/ca.pem"),
        "--cert",
        &format!("{d}/client.pem"),
        "--key",
        &format!("{d}/client.key"),
    ]
    .map(|s| s.to_string());
    let auth: Vec<&str> = auth.iter().map(String::as_str).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while broker
        .retained("strawberry/devices/kitchen/status", &auth)
        .as_deref()
        != Some("online")
    {
        assert!(
            Instant::now() < deadline,
            "never online with a client certificate: {}\n{}",
            broker.log(),
            std::fs::read_to_string(good.dir.path().join("serve.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !bad_daemon.log().contains("MQTT connection failed") {
        assert!(Instant::now() < deadline, "{}", bad_daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        broker.retained("strawberry/devices/intruder/status", &auth),
        None
    );
    bad_daemon.kill9();
}

#[test]
fn hostile_payloads_get_error_answers() {
    let broker = Broker::start();
    let kitchen = SpokeDir::new(
        "Kitchen",
        "kitchen",
        &broker.url(),
        "max_payload_bytes = 4096",
    );
    kitchen.skill("greeter.rhai", GREETER);
    let daemon = kitchen.serve();
    wait_online(&broker, "kitchen");
    registration(&broker, "kitchen", |_| true);
    let rpc = "strawberry/devices/kitchen/rpc";
    let reply = "strawberry/test/replies";
    let deep = format!(
        r#"{{"class":"Greeter","function":"hello","args":[{}"x"{}]}}"#,
        "[".repeat(1000),
        "]".repeat(1000)
    );
    let big = format!(
        r#"{{"class":"Greeter","function":"hello","args":["{}"]}}"#,
        "a".repeat(5000)
    );
    let corpus: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not json", b"hello there".to_vec(), "malformed call"),
        ("empty", Vec::new(), "malformed call"),
        ("binary", vec![0xff, 0xfe, 0x00, 0x80], "malformed call"),
        ("empty object", b"{}".to_vec(), "malformed call"),
        (
            "wrong type",
            br#"{"class":1,"function":"hello"}"#.to_vec(),
            "malformed call",
        ),
        (
            "args not array",
            br#"{"class":"Greeter","function":"hello","args":"x"}"#.to_vec(),
            "malformed call",
        ),
        (
            "unknown field",
            br#"{"class":"Greeter","function":"hello","args":["x"],"sudo":true}"#.to_vec(),
            "malformed call",
        ),
        ("deep nesting", deep.into_bytes(), "malformed call"),
        ("too big", big.into_bytes(), "over this device's limit"),
        (
            "future schema",
            br#"{"schema":99,"class":"Greeter","function":"hello","args":["x"]}"#.to_vec(),
            "newer",
        ),
        (
            "unknown class",
            br#"{"class":"../../etc/passwd","function":"x"}"#.to_vec(),
            "has no skill function",
        ),
        (
            "unknown function",
            br#"{"class":"Greeter","function":"nope"}"#.to_vec(),
            "has no skill function",
        ),
        (
            "missing argument",
            br#"{"class":"Greeter","function":"hello"}"#.to_vec(),
            "hello(name: string)",
        ),
        (
            "wrong argument type",
            br#"{"class":"Greeter","function":"hello","args":[5]}"#.to_vec(),
            "hello(name: string)",
        ),
        (
            "confirm not exported",
            br#"{"class":"Greeter","function":"forget"}"#.to_vec(),
            "remote_allow",
        ),
        (
            "never remote",
            br#"{"class":"Greeter","function":"reset"}"#.to_vec(),
            "never be called",
        ),
        (
            "runs forever",
            br#"{"class":"Greeter","function":"spin"}"#.to_vec(),
            "did not finish",
        ),
    ];
    for (i, (what, payload, expected)) in corpus.iter().enumerate() {
        let correlation = format!("c{i}");
        let answer = broker
            .request(
                rpc,
                payload,
                reply,
                &["-D", "publish", "correlation-data", &correlation],
            )
            .unwrap_or_else(|| panic!("{what}: no answer\n{}", daemon.log()));
        let answer: Value =
            serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{what}: {e}: {answer}"));
        assert_eq!(answer["ok"], false, "{what}: {answer}");
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(expected),
            "{what}: expected `{expected}` in {error}"
        );
    }
    // Answers that cannot be addressed are dropped with a log line, not sent anywhere.
    let none = broker.request(
        rpc,
        br#"{"class":"Greeter","function":"hello","args":["x"]}"#,
        "elsewhere/replies",
        &[],
    );
    assert_eq!(none, None);
    // Still responsive.
    let answer = broker
        .request(
            rpc,
            br#"{"class":"Greeter","function":"hello","args":["you"]}"#,
            reply,
            &[],
        )
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&answer).unwrap(),
        serde_json::json!({"ok": true, "result": "Hello, you!"})
    );
    assert!(
        daemon.log().contains("outside strawberry/"),
        "{}",
        daemon.log()
    );
}

#[test]
fn hot_reload_while_connected() {
    let broker = Broker::start();
    let tv = SpokeDir::new("TV", "tv1", &broker.url(), "");
    tv.skill("tv.rhai", &tv_skill("v1"));
    let daemon = tv.serve();
    registration(&broker, "tv1", |r| functions(r) == ["TvSkill.set_volume"]);
    let call = |level: i64| {
        broker
            .request(
                "strawberry/devices/tv1/rpc",
                format!(r#"{{"class":"TvSkill","function":"set_volume","args":[{level}]}}"#)
                    .as_bytes(),
                "strawberry/test/replies",
                &[],
            )
            .unwrap()
    };
    assert!(call(1).contains("v1:1"));

    // Add.
    tv.skill("greeter.rhai", GREETER);
    registration(&broker, "tv1", |r| {
        functions(r).contains(&"Greeter.hello".to_string())
    });
    // Change.
    tv.skill("tv.rhai", &tv_skill("v2"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !call(2).contains("v2:2") {
        assert!(Instant::now() < deadline, "{}", daemon.log());
    }
    // Break: reported, and the previous good version stays registered and callable.
    tv.skill(
        "tv.rhai",
        "//! Broken.\n//! @class TvSkill\n\n/// Oops.\nfn set_volume(level) {\n",
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !daemon.log().contains("failed to load") {
        assert!(Instant::now() < deadline, "{}", daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(daemon.log().contains("tv.rhai"), "{}", daemon.log());
    assert!(call(3).contains("v2:3"));
    let reg = registration(&broker, "tv1", |_| true);
    assert!(functions(&reg).contains(&"TvSkill.set_volume".to_string()));
    // Delete.
    std::fs::remove_file(tv.dir.path().join("skills/tv.rhai")).unwrap();
    registration(&broker, "tv1", |r| {
        functions(r) == ["Greeter.hello", "Greeter.spin"]
    });
    assert!(call(4).contains("has no skill function TvSkill.set_volume"));
}

/// The TV of "Living Room TV": switching it on is kept in its storage.
const TV_POWER: &str = r#"//! The living room television.
//!
//! @class TvSkill
//! @example Turn on the TV
//! device.TvSkill.power_on()

/// Switch the TV on
///
/// @return string  What the TV did.
/// @request put the goggle box on
fn power_on() {
    storage_set("power", "on");
    "the TV is on"
}

/// Whether the TV is on.
///
/// @return string  `on` or `off`.
fn power() {
    storage_get("power", "off")
}
"#;

/// A hub that answers a turn with `code`, then with `answer`.
fn hub_running(rt: &tokio::runtime::Runtime, code: &str, answer: &str) -> llm::ScriptedServer {
    rt.block_on(llm::ScriptedServer::start(vec![
        llm::Reply::Chunks(llm::text_reply(&[&format!("```rhai\n{code}\n```\n")])),
        llm::Reply::Chunks(llm::text_reply(&[answer])),
    ]))
}

fn hub_config(url: &str) -> String {
    format!("\n[hub]\nendpoints = [{{ url = \"{url}\", model = \"test\" }}]\n")
}

/// The system prompt of a request the hub received.
fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no system prompt in {request}"))
        .to_string()
}

/// In the kitchen, the prompt shows the living room TV's skill under its device and
/// key, not the skills of the garage, which is offline; a skill both have is listed
/// once; and asking to "switch on the telly" with the model's
/// `devices["living-room-tv"]` call switches the TV on over MQTT.
#[test]
fn the_kitchen_sees_and_reaches_the_living_room_tv() {
    let broker = Broker::start();
    let tv = SpokeDir::new("Living Room TV", "tv1", &broker.url(), "");
    tv.skill("tv.rhai", TV_POWER);
    tv.skill("where.rhai", &where_skill("tv"));
    let _tv = tv.serve();
    let garage = SpokeDir::new("Garage", "garage", &broker.url(), "");
    garage.skill(
        "greeter.rhai",
        &GREETER.replace("@class Greeter", "@class GarageGreeter"),
    );
    garage.skill("where.rhai", &where_skill("garage"));
    let mut garage_daemon = garage.serve();
    registration(&broker, "tv1", |_| true);
    registration(&broker, "garage", |_| true);
    wait_online(&broker, "tv1");
    garage_daemon.kill9();
    broker.wait_retained(
        "strawberry/devices/garage/status",
        Duration::from_secs(10),
        |t| t == "offline",
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let hub = hub_running(
        &rt,
        r#"devices["living-room-tv"].TvSkill.power_on()"#,
        "The TV is on.",
    );
    let kitchen = SpokeDir::new("Kitchen", "kitchen", &broker.url(), &hub_config(&hub.url));
    kitchen.skill("greeter.rhai", GREETER);
    kitchen.skill("where.rhai", &where_skill("kitchen"));
    let out = kitchen
        .command(&["ask", "switch on the telly"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("  = the TV is on\n"), "{stdout}{stderr}");
    // The call reached the TV: its storage says so.
    let (code, power, err) = tv.exec("device.TvSkill.power()");
    assert_eq!((code, power.as_str()), (0, "on"), "{err}");

    let system = system_prompt(&hub.requests()[0]);
    let here = system
        .find(
            "Skill functions of this device (device.Class.fn):\nGreeter: Greets people by name.\n",
        )
        .unwrap_or_else(|| panic!("{system}"));
    let there = system
        .find(
            "Skill functions of \"Living Room TV\" (devices[\"living-room-tv\"].Class.fn):\n\
             TvSkill: The living room television.\n  \
             power_on() -> string  Switch the TV on\n  \
             power() -> string  Whether the TV is on.\n",
        )
        .unwrap_or_else(|| panic!("{system}"));
    assert!(here < there, "{system}");
    assert!(
        system.contains("Online devices: \"Living Room TV\" devices[\"living-room-tv\"].\n"),
        "{system}"
    );
    assert!(
        system.contains(
            "WhereSkill: Says which device ran it. (also on devices[\"living-room-tv\"])\n"
        ),
        "{system}"
    );
    assert_eq!(system.matches("WhereSkill:").count(), 1, "{system}");
    // The offline garage is not offered.
    assert!(!system.contains("GarageGreeter"), "{system}");
    assert!(!system.contains("devices[\"garage\"]"), "{system}");

    // Search and class info say where a skill is and where it can run now; the
    // offline garage's skills are found, marked not online.
    let json = |code: &str| -> Value {
        let (status, out, err) = kitchen.exec(code);
        assert_eq!(status, 0, "{code}: {err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{code}: {e}: {out}"))
    };
    let hits = json(r#"device.search_skills("where am i")"#);
    assert_eq!(hits[0]["name"], "WhereSkill.where_am_i", "{hits}");
    assert_eq!(
        hits[0]["devices"],
        serde_json::json!(["Kitchen", "Garage", "Living Room TV"])
    );
    assert_eq!(
        hits[0]["online"],
        serde_json::json!(["Kitchen", "Living Room TV"])
    );
    // The TV's `@request` lines came with its registration: a word only they have
    // finds it from the kitchen.
    let hits = json(r#"device.search_skills("goggle box")"#);
    assert_eq!(hits[0]["name"], "TvSkill.power_on", "{hits}");
    assert_eq!(hits[0]["devices"], serde_json::json!(["Living Room TV"]));
    let hits = json(r#"device.search_skills("greets people")"#);
    let garage_hello = hits
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "GarageGreeter.hello")
        .unwrap_or_else(|| panic!("{hits}"));
    assert_eq!(garage_hello["devices"], serde_json::json!(["Garage"]));
    assert_eq!(garage_hello["online"], serde_json::json!([]));
    let info = json(r#"device.get_skill_info("TvSkill")"#);
    assert_eq!(info["devices"], serde_json::json!(["Living Room TV"]));
    assert_eq!(info["online"], serde_json::json!(["Living Room TV"]));
    assert_eq!(info["functions"][0]["name"], "TvSkill.power_on");
    assert_eq!(
        info["functions"][0]["online"],
        serde_json::json!(["Living Room TV"])
    );
    let info = json(r#"device.get_skill_info("GarageGreeter")"#);
    assert_eq!(
        (&info["devices"], &info["online"]),
        (&serde_json::json!(["Garage"]), &serde_json::json!([]))
    );
    let info = json(r#"device.get_skill_info("WhereSkill")"#);
    assert_eq!(
        info["devices"],
        serde_json::json!(["Kitchen", "Garage", "Living Room TV"])
    );

    // `prompt` shows the same household without a turn.
    let out = kitchen
        .command(&["prompt", "turn on the tv"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    let system = system_prompt(&body);
    assert!(
        system.contains(
            "(devices[\"living-room-tv\"].Class.fn):\nTvSkill: The living room television.\n"
        ),
        "{system}"
    );
    assert!(
        system.contains("User: Turn on the TV\nYou:\n```rhai\ndevices[\"living-room-tv\"].TvSkill.power_on()\n```\n"),
        "{system}"
    );
}

/// Without a broker `prompt` shows this device's skills and says once that it does.
#[test]
fn the_prompt_without_a_broker_says_it_is_local() {
    let kitchen = SpokeDir::new("Kitchen", "kitchen", "", "");
    kitchen.skill("greeter.rhai", GREETER);
    let out = kitchen.command(&["prompt", "say hello"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("this device's skills only").count(),
        1,
        "{stderr}"
    );
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    let system = system_prompt(&body);
    assert!(
        system.contains("Skill functions (device.Class.fn):\nGreeter:"),
        "{system}"
    );
    assert!(!system.contains("devices["), "{system}");
}

/// Skill files of `classes` classes of `per_class` functions each, named for `room`.
fn generated_skills(dir: &SpokeDir, room: usize, classes: usize, per_class: usize) {
    const NOUNS: [&str; 5] = ["light", "music", "blind", "fan", "heater"];
    for c in 0..classes {
        let mut text =
            format!("//! Room {room}, zone {c}.\n//!\n//! @class Room{room}Zone{c}Skill\n\n");
        for f in 0..per_class {
            let noun = NOUNS[(c + f) % NOUNS.len()];
            text.push_str(&format!(
                "/// Set the {noun} number {f} in zone {c}.\n///\n/// @param level: int  0 to 100.\n/// @return int  The level.\nfn set_{noun}_{f}(level) {{\n    level\n}}\n\n"
            ));
        }
        dir.skill(&format!("zone{c}.rhai"), &text);
    }
}

/// Five other rooms of 100 functions each: the prompt the hub receives stays within
/// the budget and keeps the one function the request is about, on its device.
#[test]
fn the_prompt_budget_holds_with_five_rooms_of_a_hundred_functions() {
    let broker = Broker::start();
    let mut daemons = Vec::new();
    let mut rooms = Vec::new();
    for room in 0..5 {
        let dir = SpokeDir::new(
            &format!("Room {room}"),
            &format!("room{room}"),
            &broker.url(),
            "",
        );
        generated_skills(&dir, room, 4, 25);
        if room == 3 {
            dir.skill(
                "garage.rhai",
                "//! The garage.\n//!\n//! @class GarageSkill\n\n/// Open the garage door.\nfn open_door() {\n    \"open\"\n}\n",
            );
        }
        daemons.push(dir.serve());
        rooms.push(dir);
    }
    for room in 0..5 {
        let id = format!("room{room}");
        registration(&broker, &id, |r| functions(r).len() >= 100);
        wait_online(&broker, &id);
    }

    let rt = tokio::runtime::Runtime::new().unwrap();
    let hub = rt.block_on(llm::ScriptedServer::start(vec![llm::Reply::Chunks(
        llm::text_reply(&["Which door?"]),
    )]));
    let kitchen = SpokeDir::new("Kitchen", "kitchen", &broker.url(), &hub_config(&hub.url));
    generated_skills(&kitchen, 9, 4, 25);
    let out = kitchen
        .command(&["ask", "open the garage door"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let system = system_prompt(&hub.requests()[0]);
    // The default agent.prompt_budget_tokens, counted as the spoke counts: 4 bytes a token.
    assert!(
        system.len().div_ceil(4) <= 3000,
        "{} tokens",
        system.len().div_ceil(4)
    );
    assert!(
        system.contains(
            "Skill functions of \"Room 3\" (devices[\"room-3\"].Class.fn):\nGarageSkill: The garage.\n  open_door() -> ()  Open the garage door.\n"
        ),
        "{system}"
    );
    assert!(
        system.contains("more exist. Find them with device.search_skills"),
        "{system}"
    );
    for room in 0..5 {
        assert!(
            system.contains(&format!("\"Room {room}\" devices[\"room-{room}\"]")),
            "{system}"
        );
    }
}

/// Another room's skill found by meaning: "television" is nowhere in the living room's
/// documentation, and the kitchen's own volume skill shares the word "turn". With the
/// embedding model the search finds the TV first; with words alone it does not.
#[test]
fn another_rooms_skill_is_found_by_meaning() {
    let _cores = cpu::heavy_blocking();
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/stt-test/minilm");
    assert!(
        model.join("model.safetensors").is_file(),
        "{} is missing: run tests/setup.sh first (the README's test line does)",
        model.display()
    );
    let broker = Broker::start();
    let living = SpokeDir::new("Living Room TV", "living-room-tv", &broker.url(), "");
    living.skill(
        "tv.rhai",
        r#"//! The living room's screen.
//!
//! @class TvSkill

/// Switch the TV on.
fn power_on() { "on" }

/// Switch the TV off.
fn power_off() { "off" }

/// Show the programme guide.
fn guide() { "guide" }
"#,
    );
    let volume = r#"//! How loud this spoke plays.
//!
//! @class VolumeSkill

/// Turn the volume up.
fn turn_up() { "up" }

/// Turn the volume down.
fn turn_down() { "down" }

/// Turn the sound off.
fn mute() { "muted" }
"#;
    let words = SpokeDir::new("Kitchen", "kitchen", &broker.url(), "");
    words.skill("volume.rhai", volume);
    let meaning = SpokeDir::new(
        "Kitchen",
        "kitchen",
        &broker.url(),
        &format!("\n[search]\nembedding_model = \"{}\"\n", model.display()),
    );
    meaning.skill("volume.rhai", volume);
    let mut daemon = living.serve();
    wait_online(&broker, "living-room-tv");

    let first = |dir: &SpokeDir| {
        let (code, out, err) = dir.exec(
            r#"let hit = device.search_skills("turn on the television")[0]; print(`${hit.name} ${hit.devices}`)"#,
        );
        assert_eq!(code, 0, "{out}\n{err}");
        out
    };
    assert_eq!(
        first(&meaning),
        r#"TvSkill.power_on ["Living Room TV"]"#,
        "{}",
        daemon.log()
    );
    assert!(first(&words).starts_with("VolumeSkill."));
    assert!(daemon.terminate().success());
}
