//! The MQTT link against hostile broker clients, on a real mosquitto: an oversized or
//! maxed-out registration, a second device claiming a taken name, spoofed answers on
//! our reply topic, forged retained messages under our own id, and escape sequences in
//! text from the network.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strawberry_spoke::config::Config;
use strawberry_spoke::device::Device;
use strawberry_spoke::host::HostSettings;
use strawberry_spoke::mqtt::{Link, Role};
use strawberry_spoke::sandbox::{DeviceHandler, DeviceRequest};
use strawberry_spoke::skills::Registry;
use strawberry_spoke::skills::policy::NeverConfirm;

use crate::support::mosquitto::Broker;
use crate::support::poll;

/// The bound the issue names for one search with a hostile peer registered.
const SEARCH_BOUND: Duration = Duration::from_millis(50);
/// The bound the issue names for the extra memory a hostile registration may cost.
const RSS_BOUND_KIB: i64 = 20 * 1024;
/// Far more than an `exec` needs; on the code before the limits it took minutes.
const EXEC_LIMIT: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(10);

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

/// Forget something.
///
/// @param what: string  What to forget.
/// @return string  What was done.
/// @confirm
fn forget(what) {
    "forgotten"
}
"#;

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

/// A skill slow enough for a spoofer to answer first.
const SLOW: &str = r#"//! Takes its time.
//!
//! @class SlowSkill

/// Answers after a while.
///
/// @return string  The real answer.
fn slow() {
    sleep_ms(300);
    "real"
}
"#;

/// A spoke's folder: config, skills, data, log.
struct SpokeDir {
    dir: tempfile::TempDir,
}

impl SpokeDir {
    /// Skills are open to other devices (`remote_allow = ["*"]`) unless `extra` says
    /// otherwise: these tests are about what crosses the link, not the allow-list.
    fn new(name: &str, id: &str, broker: &str, extra: &str) -> SpokeDir {
        let dir = tempfile::tempdir().unwrap();
        let open = if extra.contains("remote_allow") {
            ""
        } else {
            "remote_allow = [\"*\"]\n"
        };
        std::fs::create_dir(dir.path().join("skills")).unwrap();
        let config = format!(
            "[device]\nname = \"{name}\"\ndata_dir = \"data\"\n\n[skills]\ndir = \"skills\"\ncall_timeout_ms = 1000\n\n\
             [mqtt]\nbroker = \"{broker}\"\ndevice_id = \"{id}\"\ncall_timeout_ms = 3000\n{open}{extra}\n"
        );
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        SpokeDir { dir }
    }

    fn skill(&self, file: &str, text: &str) -> &Self {
        std::fs::write(self.dir.path().join("skills").join(file), text).unwrap();
        self
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_strawberry-spoke"));
        cmd.arg("--config")
            .arg(self.dir.path().join("config.toml"))
            .args(args)
            .env_remove("RUST_LOG")
            .env("STRAWBERRY_SPOKE__LOG__LEVEL", "info")
            .stdin(Stdio::null());
        cmd
    }

    /// `serve` in the background, logging to `serve.log`, with `stdin`.
    fn serve_with(&self, stdin: Stdio) -> Daemon {
        let log = self.dir.path().join("serve.log");
        let child = self
            .command(&["serve"])
            .stdin(stdin)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Daemon {
            child: Some(child),
            log,
        }
    }

    fn serve(&self) -> Daemon {
        self.serve_with(Stdio::null())
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

    /// `exec -e CODE`, waited for with `wait4` to read the child's own peak RSS:
    /// (exit code, stdout, stderr, max RSS in KiB). Fails after [`EXEC_LIMIT`].
    fn exec_measured(&self, code: &str) -> (i32, String, String, i64) {
        let out = self.dir.path().join("exec.out");
        let err = self.dir.path().join("exec.err");
        let child = self
            .command(&["exec", "-e", code])
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        // Killed if the wait below gives up.
        struct Reap(i32, bool);
        impl Drop for Reap {
            fn drop(&mut self) {
                if !self.1 {
                    // SAFETY: our own child, not reaped yet.
                    unsafe {
                        libc::kill(self.0, libc::SIGKILL);
                        libc::waitpid(self.0, std::ptr::null_mut(), 0);
                    }
                }
            }
        }
        let mut reap = Reap(pid, false);
        let (status, usage) = poll::wait_for("exec to finish", EXEC_LIMIT, || {
            let mut status = 0;
            // SAFETY: plain wait4 on our own child into local out-parameters.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            let done = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
            (done == pid).then_some((status, usage))
        });
        reap.1 = true;
        drop(child);
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            -1
        };
        (
            code,
            std::fs::read_to_string(out).unwrap().trim().to_string(),
            std::fs::read_to_string(err).unwrap(),
            usage.ru_maxrss,
        )
    }
}

/// A `serve` process, killed when dropped.
struct Daemon {
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
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

/// Publishes `payload` retained on `topic` (from a file: it can be large).
fn publish_retained(broker: &Broker, topic: &str, payload: &[u8]) {
    let file = broker
        .dir
        .path()
        .join(format!("{}.bin", topic.replace('/', "_")));
    std::fs::write(&file, payload).unwrap();
    let status = Command::new("mosquitto_pub")
        .args(broker.client_args())
        .args(["-r", "-t", topic, "-f"])
        .arg(&file)
        .status()
        .expect("mosquitto_pub");
    assert!(status.success());
}

fn wait_online(broker: &Broker, id: &str) {
    broker.wait_retained(&format!("strawberry/devices/{id}/status"), WAIT, |t| {
        t == "online"
    });
}

fn wait_registered(broker: &Broker, id: &str) -> Value {
    let text = broker.wait_retained(&format!("strawberry/devices/{id}/skills"), WAIT, |t| {
        serde_json::from_str::<Value>(t).is_ok()
    });
    serde_json::from_str(&text).unwrap()
}

/// A registration of `functions` functions with `description_bytes` of class prose
/// and a realistic amount of text per function.
fn registration(id: &str, name: &str, functions: usize, description_bytes: usize) -> Vec<u8> {
    let words = [
        "volume", "level", "speaker", "music", "lights", "kitchen", "timer",
    ];
    let prose = |n: usize| {
        let mut text = String::new();
        let mut i = 0;
        while text.len() < n {
            text.push_str(words[i % words.len()]);
            text.push_str(&format!("{i} "));
            i += 1;
        }
        text.truncate(n);
        text
    };
    let functions: Vec<Value> = (0..functions)
        .map(|i| {
            json!({
                "name": format!("f{i}"),
                "signature": format!("f{i}(level: int, room: string) -> string"),
                "summary": format!("Set the {} of thing {i}.", words[i % words.len()]),
                "docstring": prose(600),
                "params": [
                    {"name": "level", "type": "int", "description": "0 to 100."},
                    {"name": "room", "type": "string", "description": "Which room."}
                ],
                "returns": "string"
            })
        })
        .collect();
    let examples: Vec<Value> = (0..10)
        .map(|i| json!({"request": format!("turn the thing {i} up"), "code": format!("device.Huge.f{i}(50, \"x\")")}))
        .collect();
    serde_json::to_vec(&json!({
        "schema": 1,
        "device_id": id,
        "name": name,
        "classes": [{
            "name": "Huge",
            "summary": "Many things.",
            "description": prose(description_bytes),
            "examples": examples,
            "functions": functions,
        }]
    }))
    .unwrap()
}

/// A caller link in this process, connected, with a `device` over no local skills.
fn caller(rt: &tokio::runtime::Runtime, broker: &Broker, id: &str) -> (Link, Device) {
    let mut config = Config::default();
    config.mqtt.broker = broker.url();
    config.mqtt.device_id = id.into();
    config.mqtt.call_timeout_ms = 3000;
    let settings = config.link_settings().unwrap().unwrap();
    let link = rt.block_on(async {
        let link = Link::start(settings, Role::Caller);
        assert!(link.wait_ready(WAIT).await, "never connected");
        link
    });
    let registry = Arc::new(Registry::new(Vec::new(), HostSettings::default()));
    let device = Device::new("Hall", registry, Arc::new(NeverConfirm)).with_link(link.clone());
    (link, device)
}

/// The median time of a few searches for `query` (one slow outlier is the machine's,
/// not the search's), and the last answer.
fn time_search(device: &Device, query: &str) -> (Duration, Value) {
    let mut times = Vec::new();
    let mut answer = Value::Null;
    for _ in 0..5 {
        let started = Instant::now();
        answer = device
            .handle(DeviceRequest::SearchSkills {
                query: query.into(),
            })
            .unwrap();
        times.push(started.elapsed());
    }
    times.sort();
    (times[times.len() / 2], answer)
}

/// The registration that took 40 s and 1 GB per search (559 KB, 1,000 functions, a
/// long class description): refused, and an `exec` searching with it retained costs
/// no more time or memory than one without it.
#[test]
fn hostile_registration_costs_neither_time_nor_memory() {
    let broker = Broker::start();
    let hall = SpokeDir::new("Hall", "hall", &broker.url(), "");
    let code = r#"device.search_skills("x").len()"#;
    let (status, out, err, baseline) = hall.exec_measured(code);
    assert_eq!((status, out.as_str()), (0, "0"), "{err}");

    let hostile = registration("evil", "Evil", 1000, 100_000);
    assert!(hostile.len() > 550_000, "{}", hostile.len());
    publish_retained(&broker, "strawberry/devices/evil/skills", &hostile);
    publish_retained(&broker, "strawberry/devices/evil/status", b"online");
    let started = Instant::now();
    let (status, out, err, rss) = hall.exec_measured(code);
    assert_eq!(status, 0, "{err}");
    assert_eq!(out, "0", "the hostile registration was taken in: {err}");
    assert!(
        rss - baseline <= RSS_BOUND_KIB,
        "exec peaked at {rss} KiB with the hostile registration, {baseline} KiB without"
    );
    assert!(started.elapsed() < EXEC_LIMIT);

    // Timed inside: the search itself, with the registration retained.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (link, device) = caller(&rt, &broker, "timer");
    let (took, answer) = time_search(&device, "x");
    assert!(took < SEARCH_BOUND, "search took {took:?}");
    assert_eq!(answer, json!([]));
    assert!(link.with_peers(|peers| {
        peers
            .all()
            .filter(|p| p.id == "evil")
            .all(|p| p.classes.is_empty())
    }));
    // Refused, and why, for anyone who asks.
    let refusal = link.with_peers(|peers| peers.refusal("evil").map(|e| e.to_string()));
    assert!(
        refusal
            .as_deref()
            .is_some_and(|e| e.contains("mqtt.max_registration_bytes")),
        "{refusal:?}"
    );
    rt.block_on(link.shutdown());
}

/// Five peers with registrations that use most of what the limits allow: a search
/// still takes well under the bound, whatever the query.
#[test]
fn search_over_full_registrations_is_fast() {
    let broker = Broker::start();
    for i in 0..5 {
        let id = format!("peer{i}");
        let payload = registration(&id, &format!("Peer {i}"), 200, 8000);
        publish_retained(
            &broker,
            &format!("strawberry/devices/{id}/skills"),
            &payload,
        );
        publish_retained(
            &broker,
            &format!("strawberry/devices/{id}/status"),
            b"online",
        );
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (link, device) = caller(&rt, &broker, "timer");
    poll::wait_until("the five peers", WAIT, || {
        link.with_peers(|p| {
            p.all()
                .filter(|p| p.online && !p.classes.is_empty())
                .count()
                == 5
        })
    });
    for query in ["x", "", "volume level", "speakr musc", "thing 7 up"] {
        let (took, answer) = time_search(&device, query);
        assert!(took < SEARCH_BOUND, "search for {query:?} took {took:?}");
        let hits = answer.as_array().unwrap();
        if !query.is_empty() && query != "x" {
            // One entry per function, hosted by all five.
            assert_eq!(hits.len(), 20, "{query}");
            assert_eq!(hits[0]["devices"].as_array().unwrap().len(), 5, "{query}");
        }
    }
    rt.block_on(link.shutdown());
}

/// A second device calling itself "Kitchen" is refused: `devices["kitchen"]` and a
/// plain call reach the device that had the name first.
#[test]
fn a_second_kitchen_does_not_take_the_name() {
    let broker = Broker::start();
    let kitchen = SpokeDir::new("Kitchen", "kitchen", &broker.url(), "");
    kitchen.skill("where.rhai", &where_skill("kitchen"));
    let _kitchen = kitchen.serve();
    wait_online(&broker, "kitchen");
    wait_registered(&broker, "kitchen");
    // Sorts first by id, so "the first that matches" would pick it.
    let impostor = SpokeDir::new("Kitchen", "aaa-impostor", &broker.url(), "");
    impostor.skill("where.rhai", &where_skill("impostor"));
    let impostor_daemon = impostor.serve();
    wait_online(&broker, "aaa-impostor");
    wait_registered(&broker, "aaa-impostor");

    let hall = SpokeDir::new("Hall", "hall", &broker.url(), "");
    let (code, out, err) = hall.exec(r#"devices["kitchen"].WhereSkill.where_am_i()"#);
    assert_eq!((code, out.as_str()), (0, "kitchen"), "{err}");
    // The impostor's skills are not offered either: the call is not ambiguous.
    let (code, out, err) = hall.exec("device.WhereSkill.where_am_i()");
    assert_eq!((code, out.as_str()), (0, "kitchen"), "{err}");
    let (code, out, err) =
        hall.exec(r#"let s = device.search_skills("where"); s.len() + ":" + s[0].devices.len()"#);
    assert_eq!((code, out.as_str()), (0, "1:1"), "{err}");
    // The impostor itself was told that the name is taken.
    poll::wait_until("the impostor to report the taken name", WAIT, || {
        impostor_daemon.log().contains("already taken")
    });
}

/// Answers published on our reply topic by someone else, with every small correlation
/// id, are not taken for the answer of the call in flight.
#[test]
fn spoofed_replies_are_not_answers() {
    let broker = Broker::start();
    let tv = SpokeDir::new("TV", "tv1", &broker.url(), "");
    tv.skill("slow.rhai", SLOW);
    let _tv = tv.serve();
    wait_online(&broker, "tv1");
    wait_registered(&broker, "tv1");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (link, _) = caller(&rt, &broker, "caller");
    let reply_topic = format!(
        "strawberry/devices/caller-caller-{}/replies",
        std::process::id()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let spoofer = {
        let stop = stop.clone();
        let port = broker.port;
        rt.spawn(async move {
            use rumqttc::v5::mqttbytes::QoS;
            use rumqttc::v5::mqttbytes::v5::PublishProperties;
            let options = rumqttc::v5::MqttOptions::new("spoofer", "127.0.0.1", port);
            let (client, mut eventloop) = rumqttc::v5::AsyncClient::new(options, 1024);
            tokio::spawn(async move { while eventloop.poll().await.is_ok() {} });
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for id in 1u64..=32 {
                    let properties = PublishProperties {
                        correlation_data: Some(bytes::Bytes::copy_from_slice(&id.to_be_bytes())),
                        ..PublishProperties::default()
                    };
                    let _ = client
                        .publish_with_properties(
                            reply_topic.clone(),
                            QoS::AtLeastOnce,
                            false,
                            br#"{"ok":true,"result":"spoofed"}"#.to_vec(),
                            properties,
                        )
                        .await;
                    sent += 1;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            sent
        })
    };
    for _ in 0..3 {
        let outcome = link.call_blocking("tv1", "TV", "SlowSkill", "slow", &[]);
        assert_eq!(outcome, Ok(Value::from("real")));
    }
    stop.store(true, Ordering::Relaxed);
    let sent = rt.block_on(spoofer).unwrap();
    assert!(sent > 32, "the spoofer sent only {sent} answers");
    rt.block_on(link.shutdown());
}

/// A remote call made for a run ends when the run's time is up, not at the (longer)
/// call timeout.
#[test]
fn a_remote_call_ends_with_the_run() {
    const RUN: Duration = Duration::from_millis(200);
    const SLACK: Duration = Duration::from_millis(500);
    let broker = Broker::start();
    let tv = SpokeDir::new("TV", "tv1", &broker.url(), "");
    tv.skill(
        "spin.rhai",
        "//! Spins.\n//!\n//! @class SpinSkill\n\n/// Never returns.\nfn spin() {\n    loop {}\n}\n",
    );
    let _tv = tv.serve();
    wait_online(&broker, "tv1");
    wait_registered(&broker, "tv1");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (link, _) = caller(&rt, &broker, "runner");
    let started = Instant::now();
    let outcome = strawberry_spoke::deadline::with_deadline(started + RUN, || {
        link.call_blocking("tv1", "TV", "SpinSkill", "spin", &[])
    });
    let took = started.elapsed();
    let error = outcome.unwrap_err();
    assert!(error.contains("ran out of time"), "{error}");
    assert!(took < RUN + SLACK, "the call took {took:?}");
    rt.block_on(link.shutdown());
}

/// Someone else publishing `offline` or an empty registration, retained, under our
/// id: the spoke puts its own back.
#[test]
fn forged_own_status_and_registration_are_corrected() {
    let broker = Broker::start();
    let kitchen = SpokeDir::new("Kitchen", "kitchen", &broker.url(), "");
    kitchen.skill("greeter.rhai", GREETER);
    let daemon = kitchen.serve();
    wait_online(&broker, "kitchen");
    let genuine = wait_registered(&broker, "kitchen");
    assert!(!genuine["classes"].as_array().unwrap().is_empty());

    publish_retained(&broker, "strawberry/devices/kitchen/status", b"offline");
    let forged = json!({"schema": 1, "device_id": "kitchen", "name": "Kitchen", "classes": []});
    publish_retained(
        &broker,
        "strawberry/devices/kitchen/skills",
        forged.to_string().as_bytes(),
    );
    poll::wait_until("the status to be corrected", WAIT, || {
        broker
            .retained("strawberry/devices/kitchen/status", &[])
            .as_deref()
            == Some("online")
    });
    poll::wait_until("the registration to be corrected", WAIT, || {
        broker
            .retained("strawberry/devices/kitchen/skills", &[])
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|r| r == genuine)
    });
    assert!(
        daemon.log().contains("another client wrote"),
        "{}",
        daemon.log()
    );
}

/// Text from the network reaches no terminal or log with its control characters: the
/// names and documentation of a peer's registration, and the `from` and arguments of
/// a call shown in the confirmation prompt.
#[test]
fn escape_sequences_from_the_network_are_stripped() {
    let broker = Broker::start();
    let evil = json!({
        "schema": 1, "device_id": "evil", "name": "Evil\u{1b}]0;pwned\u{7}\u{202e}",
        "classes": [{
            "name": "Tricks",
            "summary": "Tricks\u{1b}[2J\u{9b}31m.",
            "description": "Line one\n\u{1b}[1Aline two\u{2066}",
            "functions": [{"name": "trick", "signature": "trick() -> string",
                "summary": "A \u{1b}[8mhidden\u{1b}[0m trick.", "docstring": "\u{7}",
                "params": [], "returns": "string"}]
        }]
    });
    publish_retained(
        &broker,
        "strawberry/devices/evil/skills",
        evil.to_string().as_bytes(),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (link, _) = caller(&rt, &broker, "viewer");
    let texts = link.with_peers(|peers| {
        let p = peers.all().find(|p| p.id == "evil").expect("the peer");
        let c = &p.classes[0];
        let f = &c.functions[0];
        vec![
            p.name.clone(),
            c.summary.clone(),
            c.description.clone(),
            f.summary.clone(),
            f.docstring.clone(),
        ]
    });
    for text in &texts {
        assert!(!has_controls(text, true), "{text:?}");
    }
    assert_eq!(texts[0], "Evil]0;pwned");
    assert_eq!(texts[2], "Line one\n[1Aline two");
    rt.block_on(link.shutdown());

    // The confirmation prompt of `serve`, on a terminal.
    let kitchen = SpokeDir::new(
        "Kitchen",
        "kitchen",
        &broker.url(),
        "remote_allow = [\"*\", \"Greeter.forget\"]",
    );
    kitchen.skill("greeter.rhai", GREETER);
    let (master, slave) = pty();
    let daemon = kitchen.serve_with(Stdio::from(slave));
    wait_online(&broker, "kitchen");
    wait_registered(&broker, "kitchen");
    let answer_prompt = {
        let log = daemon.log.clone();
        std::thread::spawn(move || {
            poll::wait_until("the confirmation prompt", WAIT, || {
                std::fs::read_to_string(&log).is_ok_and(|t| t.contains("Allow "))
            });
            let mut master = std::fs::File::from(master);
            std::io::Write::write_all(&mut master, b"n\n").unwrap();
            master
        })
    };
    let call = json!({
        "class": "Greeter", "function": "forget",
        "args": ["\u{9b}2J\u{202e}"],
        "from": "\u{1b}]0;pwned\u{7}\u{1b}[2JHub\u{202e}",
    });
    let answer = broker
        .request(
            "strawberry/devices/kitchen/rpc",
            call.to_string().as_bytes(),
            "strawberry/test/replies",
            &[],
        )
        .expect("an answer");
    let _master = answer_prompt.join().unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let error = answer["error"].as_str().unwrap();
    assert!(
        error.contains("did not allow") && error.contains("Hub"),
        "{error}"
    );
    assert!(!has_controls(error, false), "{error:?}");
    let log = daemon.log();
    let prompt = &log[log.find("Allow ").unwrap()..];
    let prompt = prompt.lines().next().unwrap();
    assert!(prompt.contains("from ]0;pwned[2JHub"), "{prompt:?}");
    assert!(!has_controls(prompt, false), "{prompt:?}");
}

/// Whether `text` has control characters or bidirectional overrides (line breaks
/// allowed when `prose`).
fn has_controls(text: &str, prose: bool) -> bool {
    text.chars().any(|c| {
        (c.is_control() && !(prose && c == '\n'))
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

/// A pseudo-terminal: (master, slave).
fn pty() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty fills two descriptors we then own.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both were just opened for us.
    unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(master),
            std::os::fd::OwnedFd::from_raw_fd(slave),
        )
    }
}
