//! The bundled `HomeAssistant` skill against a real Home Assistant core (2024.3.3 with
//! its `demo` integration) that each test starts on loopback from the venv
//! `tests/setup.sh` makes: real REST API, real login flow, real conversation agent.
//! "Turn on the kitchen lights" goes through the real `run` daemon (wake word through
//! the FIFO microphone, tiny.en, the scripted hub, the sandbox, the skill) and changes
//! the light in Home Assistant; an unknown name, a wrong token and a stopped server
//! each reach the model and the log while the daemon goes on. A missing Home
//! Assistant fails these tests: run `bash tests/setup.sh`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use strawberry_spoke::config::HomeAssistantConfig;

use crate::support::daemon::{NotifySocket, Spoke, wake_phrase};
use crate::support::llm::{Reply, ScriptedServer, text_reply};
use crate::support::mouth::Mouth;
use crate::support::skill::{Skill, field};
use crate::support::{cpu, poll, skill};

/// How long Home Assistant may take to start on a busy machine (about 2 s when idle).
const START: Duration = Duration::from_secs(120);
/// A generous bound on each step of a voice turn.
const STEP: Duration = Duration::from_secs(30);
const IDLE: &str = "Listening for \"";

/// A Home Assistant core on loopback, stopped when dropped.
struct HomeAssistant {
    child: Option<Child>,
    dir: tempfile::TempDir,
    url: String,
    token: String,
}

fn venv() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps/ha-venv")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

impl HomeAssistant {
    /// Writes a config dir (demo entities, HTTP on a free loopback port), adds a user,
    /// starts `hass` and logs in through the login flow for a token.
    fn start() -> HomeAssistant {
        // `python -m homeassistant`, not `bin/hass`: the venv's scripts name the path it
        // was made at in their first line, and a worktree's `target` may be another's.
        let python = venv().join("bin/python");
        let hass = || {
            let mut cmd = Command::new(&python);
            cmd.args(["-m", "homeassistant"]);
            cmd
        };
        assert!(
            venv().join("bin/hass").exists(),
            "no Home Assistant at {}: run `bash tests/setup.sh`",
            venv().display()
        );
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        std::fs::write(
            dir.path().join("configuration.yaml"),
            format!("http:\n  server_host: 127.0.0.1\n  server_port: {port}\ndemo:\n"),
        )
        .unwrap();
        let added = hass()
            .args(["--script", "auth", "-c"])
            .arg(dir.path())
            .args(["add", "spoke", "spoke-test-password"])
            .output()
            .unwrap();
        assert!(
            added.status.success(),
            "hass --script auth: {}",
            String::from_utf8_lossy(&added.stderr)
        );
        let log = std::fs::File::create(dir.path().join("hass.log")).unwrap();
        let child = hass()
            .arg("-c")
            .arg(dir.path())
            .arg("--skip-pip")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let mut ha = HomeAssistant {
            child: Some(child),
            dir,
            url,
            token: String::new(),
        };
        let api = format!("{}/api/", ha.url);
        poll::wait_until("Home Assistant's API", START, || {
            agent().get(&api).call().is_ok_and(|r| r.status() == 401)
        });
        ha.token = ha.login();
        // The demo's entities come up just after the API.
        poll::wait_until("the demo's kitchen lights", START, || {
            ha.try_state("light.kitchen_lights").is_some()
        });
        ha
    }

    /// `/auth/login_flow` then `/auth/token`, as the frontend logs in.
    fn login(&self) -> String {
        let client = format!("{}/", self.url);
        let flow: Value = agent()
            .post(&format!("{}/auth/login_flow", self.url))
            .send_json(json!({"client_id": client, "handler": ["homeassistant", null], "redirect_uri": client}))
            .unwrap()
            .body_mut()
            .read_json()
            .unwrap();
        let flow_id = flow["flow_id"].as_str().expect("a flow id").to_string();
        let done: Value = agent()
            .post(&format!("{}/auth/login_flow/{flow_id}", self.url))
            .send_json(json!({"client_id": client, "username": "spoke", "password": "spoke-test-password"}))
            .unwrap()
            .body_mut()
            .read_json()
            .unwrap();
        let code = done["result"].as_str().expect("an authorization code");
        let token: Value = agent()
            .post(&format!("{}/auth/token", self.url))
            .send_form([
                ("grant_type", "authorization_code"),
                ("code", code),
                ("client_id", client.as_str()),
            ])
            .unwrap()
            .body_mut()
            .read_json()
            .unwrap();
        token["access_token"]
            .as_str()
            .expect("an access token")
            .to_string()
    }

    fn try_state(&self, entity: &str) -> Option<Value> {
        let mut r = agent()
            .get(&format!("{}/api/states/{entity}", self.url))
            .header("authorization", &format!("Bearer {}", self.token))
            .call()
            .ok()?;
        (r.status() == 200).then(|| r.body_mut().read_json().ok())?
    }

    /// The entity's state object, read straight from Home Assistant.
    fn state(&self, entity: &str) -> Value {
        self.try_state(entity)
            .unwrap_or_else(|| panic!("no state for {entity}"))
    }

    /// Calls a service directly, to set the scene for a test.
    fn service(&self, domain: &str, service: &str, data: Value) {
        let r = agent()
            .post(&format!("{}/api/services/{domain}/{service}", self.url))
            .header("authorization", &format!("Bearer {}", self.token))
            .send_json(data)
            .unwrap();
        assert_eq!(r.status(), 200, "{domain}.{service}");
    }

    /// A token file for the spoke.
    fn token_file(&self) -> PathBuf {
        let path = self.dir.path().join("spoke-token");
        std::fs::write(&path, format!("{}\n", self.token)).unwrap();
        path
    }

    fn config(&self, token_file: &Path) -> HomeAssistantConfig {
        HomeAssistantConfig {
            url: self.url.clone(),
            token_file: Some(token_file.to_path_buf()),
            ..HomeAssistantConfig::default()
        }
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill only sends a signal to our own child.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
            let _ = child.wait();
        }
    }
}

impl Drop for HomeAssistant {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The bundled skill, loaded as the daemon loads it, pointed at `config`.
fn skill(config: &HomeAssistantConfig, data: &Path) -> Skill {
    let settings = strawberry_spoke::host::HostSettings {
        homeassistant: config.settings(),
        ..skill::settings(data)
    };
    Skill::load_with("homeassistant.rhai", settings)
}

fn states(result: &rhai::Dynamic) -> Vec<(String, String)> {
    result
        .clone()
        .into_array()
        .unwrap()
        .iter()
        .map(|e| (field::<String>(e, "entity_id"), field::<String>(e, "state")))
        .collect()
}

#[test]
fn the_skill_finds_and_controls_a_real_home() {
    let _cores = cpu::heavy_blocking();
    let ha = HomeAssistant::start();
    let data = tempfile::tempdir().unwrap();
    let home = skill(&ha.config(&ha.token_file()), data.path());

    // Found by name and kind; no entity list anywhere but in answers to `find`.
    let found = home.ok("find", ("kitchen".to_string(), "light".to_string()));
    let ids: Vec<String> = found
        .clone()
        .into_array()
        .unwrap()
        .iter()
        .map(|e| field::<String>(e, "entity_id"))
        .collect();
    assert_eq!(ids, ["light.kitchen_lights"]);
    let all = home.ok("find", (String::new(), String::new()));
    assert!(all.clone().into_array().unwrap().len() <= 20);

    // On and off, brightness and colour temperature, by the names people say.
    ha.service(
        "light",
        "turn_off",
        json!({"entity_id": "light.kitchen_lights"}),
    );
    let on = home.ok("turn_on", ("the kitchen lights".to_string(),));
    assert_eq!(
        states(&on),
        [("light.kitchen_lights".to_string(), "on".to_string())]
    );
    assert_eq!(ha.state("light.kitchen_lights")["state"], "on");
    let dimmed = home.ok("set_brightness", ("kitchen lights".to_string(), 30_i64));
    assert_eq!(states(&dimmed), states(&on));
    let brightness = ha.state("light.kitchen_lights")["attributes"]["brightness"]
        .as_i64()
        .unwrap();
    assert!(
        (75..=78).contains(&brightness),
        "30 % is about 77 of 255, got {brightness}"
    );
    let warm = home.ok("set_color_temp", ("ceiling lights".to_string(), 2700_i64));
    assert_eq!(states(&warm)[0].0, "light.ceiling_lights");
    // Home Assistant keeps mireds: 2700 K comes back within a few kelvin.
    let kelvin = ha.state("light.ceiling_lights")["attributes"]["color_temp_kelvin"]
        .as_i64()
        .unwrap();
    assert!((2690..=2710).contains(&kelvin), "{kelvin} K");
    // A light without white temperatures says so instead of doing nothing.
    let err = home
        .call(
            "set_color_temp",
            ("living room lights".to_string(), 2700_i64),
        )
        .unwrap_err();
    assert!(err.contains("no white colour temperature"), "{err}");
    let read = home.ok("state", ("kitchen lights".to_string(),));
    assert_eq!(field::<i64>(&read, "brightness"), 30);
    let off = home.ok("turn_off", ("light.kitchen_lights".to_string(),));
    assert_eq!(
        states(&off),
        [("light.kitchen_lights".to_string(), "off".to_string())]
    );
    assert_eq!(ha.state("light.kitchen_lights")["state"], "off");

    // Climate, covers, media players, locks.
    let _ = home.ok("set_temperature", ("heatpump".to_string(), 22.5_f64));
    assert_eq!(
        ha.state("climate.heatpump")["attributes"]["temperature"],
        22.5
    );
    let _ = home.ok("set_cover_position", ("hall window".to_string(), 40_i64));
    poll::wait_until("the hall window at 40 %", STEP, || {
        ha.state("cover.hall_window")["attributes"]["current_position"] == 40
    });
    let err = home
        .call("set_cover_position", ("kitchen window".to_string(), 40_i64))
        .unwrap_err();
    assert!(err.contains("use open_cover or close_cover"), "{err}");
    let paused = home.ok("media", ("walkman".to_string(), "pause".to_string()));
    assert_eq!(states(&paused)[0].1, "paused");
    assert_eq!(ha.state("media_player.walkman")["state"], "paused");
    let _ = home.ok("media_volume", ("walkman".to_string(), 25_i64));
    assert_eq!(
        ha.state("media_player.walkman")["attributes"]["volume_level"],
        0.25
    );
    let locked = home.ok("lock", ("kitchen door".to_string(),));
    assert_eq!(states(&locked)[0].1, "locked");
    assert_eq!(ha.state("lock.kitchen_door")["state"], "locked");

    // Home Assistant's own agent for the rest.
    ha.service("light", "turn_on", json!({"entity_id": "light.bed_light"}));
    let said = home.ok("ask", ("turn off the bed light".to_string(),));
    assert!(!said.to_string().is_empty());
    assert_eq!(ha.state("light.bed_light")["state"], "off");

    // A garage door is not a blind: opening it is the function that asks first.
    let err = home
        .call("open_cover", ("garage door".to_string(),))
        .unwrap_err();
    assert!(err.contains("use open_door"), "{err}");
    assert_eq!(ha.state("cover.garage_door")["state"], "closed");

    // An unknown name says how to find names.
    let err = home
        .call("turn_on", ("garden gnome".to_string(),))
        .unwrap_err();
    assert!(err.contains("no Home Assistant entity"), "{err}");
    assert!(
        err.contains("device.HomeAssistant.find(\"garden\")"),
        "{err}"
    );
}

#[test]
fn an_answer_over_the_size_limit_is_refused_naming_the_limit() {
    let ha = HomeAssistant::start();
    let data = tempfile::tempdir().unwrap();
    // The names and areas of the demo's 101 entities take about 10 kB.
    let config = HomeAssistantConfig {
        max_response_bytes: 2_000,
        ..ha.config(&ha.token_file())
    };
    let home = skill(&config, data.path());
    ha.service(
        "light",
        "turn_off",
        json!({"entity_id": "light.kitchen_lights"}),
    );
    let err = home
        .call("turn_on", ("the kitchen lights".to_string(),))
        .unwrap_err();
    assert!(
        err.contains("Home Assistant's answer to /api/")
            && err.contains("larger than 2000 bytes")
            && err.contains("raise homeassistant.max_response_bytes"),
        "{err}"
    );
    assert_eq!(ha.state("light.kitchen_lights")["state"], "off");
    // Within the limit the same call goes through.
    let home = skill(&ha.config(&ha.token_file()), data.path());
    let on = home.ok("turn_on", ("the kitchen lights".to_string(),));
    assert_eq!(states(&on)[0].1, "on");
}

#[test]
fn unlocking_disarming_and_opening_doors_ask_first() {
    let data = tempfile::tempdir().unwrap();
    let home = skill(&HomeAssistantConfig::default(), data.path());
    let class = strawberry_spoke::skills::Registry::load_file(
        &skill::skills_dir().join("homeassistant.rhai"),
        &home.settings,
    )
    .unwrap();
    let confirmed: Vec<&str> = class
        .functions
        .iter()
        .filter(|f| f.confirm)
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(confirmed, ["open_door", "unlock", "disarm_alarm"]);
    assert!(
        class.functions.iter().all(|f| !f.remote),
        "nothing opened to other rooms"
    );
    // Not set up: the error says which keys to set.
    let err = home
        .call("turn_on", ("kitchen lights".to_string(),))
        .unwrap_err();
    assert!(err.contains("homeassistant.url"), "{err}");
}

#[test]
fn unlock_from_model_code_without_a_person_is_refused() {
    let _cores = cpu::heavy_blocking();
    let ha = HomeAssistant::start();
    let token = ha.token_file();
    // `exec` runs code without the hub.
    let spoke = Spoke::new(
        "http://127.0.0.1:9/v1",
        &[],
        &format!(
            "[homeassistant]\nurl = \"{}\"\ntoken_file = \"{}\"\n",
            ha.url,
            token.display()
        ),
    );
    assert_eq!(ha.state("lock.front_door")["state"], "locked");
    let out = spoke
        .command(&["exec", "-e", r#"device.HomeAssistant.unlock("front door")"#])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(ha.state("lock.front_door")["state"], "locked");
    // Locking needs nobody's yes.
    let out = spoke
        .command(&["exec", "-e", r#"device.HomeAssistant.lock("kitchen door")"#])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ha.state("lock.kitchen_door")["state"], "locked");
    assert!(!spoke.log().contains(&ha.token) && !stderr.contains(&ha.token));
}

fn code(code: &str) -> Reply {
    Reply::Chunks(text_reply(&[&format!("```rhai\n{code}\n```")]))
}

/// The text of the last message of a request to the hub: the feedback on the code.
fn feedback(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| {
            m["content"]
                .as_str()
                .map_or_else(|| m["content"].to_string(), str::to_string)
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_on_the_kitchen_lights_by_voice_and_errors_reach_the_model_and_the_log() {
    let _cores = cpu::quiet().await;
    let mut ha = HomeAssistant::start();
    ha.service(
        "light",
        "turn_off",
        json!({"entity_id": "light.kitchen_lights"}),
    );
    let token = ha.token_file();
    let turn_on = r#"device.HomeAssistant.turn_on("kitchen lights")"#;
    let hub = ScriptedServer::start(vec![
        code(turn_on),
        Reply::Chunks(text_reply(&["The kitchen lights are on."])),
        code(r#"device.HomeAssistant.turn_on("garden gnome")"#),
        Reply::Chunks(text_reply(&["I could not find that."])),
        code(turn_on),
        Reply::Chunks(text_reply(&["Home Assistant refused me."])),
        code(turn_on),
        Reply::Chunks(text_reply(&["Home Assistant is not answering."])),
    ])
    .await;
    let spoke = Spoke::new(
        &hub.url,
        &[],
        &format!(
            "[homeassistant]\nurl = \"{}\"\ntoken_file = \"{}\"\n",
            ha.url,
            token.display()
        ),
    );
    let notify = NotifySocket::bind(&spoke);
    let mouth = Mouth::open(&spoke.path("mic.fifo"));
    let phrase = wake_phrase("en-gb-x-rp_m1");
    let mut daemon = spoke.run(&notify);
    let (mut at, _) = notify.wait_status(&spoke, IDLE, 0, STEP);
    let mut turn = |requests: usize| {
        mouth.say(&phrase);
        poll::wait_until("the hub's answer to the code", STEP * 2, || {
            hub.requests().len() >= requests
        });
        let (idle, _) = notify.wait_status(&spoke, IDLE, at + 1, STEP);
        at = idle;
        feedback(&hub.requests()[requests - 1])
    };

    // 1. The light goes on in Home Assistant.
    turn(2);
    assert_eq!(ha.state("light.kitchen_lights")["state"], "on");

    // 2. A name that matches nothing: the model is told how to find names.
    let told = turn(4);
    assert!(told.contains("no Home Assistant entity"), "{told}");
    assert!(told.contains("HomeAssistant.find"), "{told}");

    // 3. A wrong token (the file is read at each request, so no restart).
    ha.service(
        "light",
        "turn_off",
        json!({"entity_id": "light.kitchen_lights"}),
    );
    std::fs::write(&token, "not-a-valid-token\n").unwrap();
    let told = turn(6);
    assert!(told.contains("refused the token"), "{told}");
    assert!(told.contains("/profile/security"), "{told}");
    assert_eq!(ha.state("light.kitchen_lights")["state"], "off");

    // 4. Home Assistant stopped: the URL it tried.
    std::fs::write(&token, format!("{}\n", ha.token)).unwrap();
    let url = ha.url.clone();
    ha.stop();
    let told = turn(8);
    assert!(
        told.contains(&format!("cannot reach Home Assistant at {url}")),
        "{told}"
    );

    // The log has each error, never the token; the daemon is still running.
    let log = spoke.log();
    for expected in [
        "no Home Assistant entity",
        "refused the token",
        "cannot reach Home Assistant",
    ] {
        assert!(log.contains(expected), "{expected} not in the log:\n{log}");
    }
    assert!(!log.contains(&ha.token));
    assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon exited");
    daemon.stop();
    drop(mouth);
}
