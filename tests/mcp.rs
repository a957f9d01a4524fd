//! MCP servers as skill classes, against the real servers (tests/setup-mcp.sh installs
//! them into target/test-deps): mcp-server-time over stdio, and
//! @modelcontextprotocol/server-everything over stdio and Streamable HTTP on loopback,
//! and a real mosquitto for the registration of an opened server.
//! Two servers are written here: the one that never answers `initialize` (no real
//! server misbehaves that way on purpose), and one on the official Python SDK (the
//! `mcp` package mcp-server-time runs on) whose tool list changes when asked: the
//! published servers announce no change after their start (server-everything's one
//! `tools/list_changed` comes as it initializes, before the first list is read).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strawberry_spoke::config::McpConfig;
use strawberry_spoke::deadline::{self, Cancel};
use strawberry_spoke::host::HostSettings;
use strawberry_spoke::mcp::{Mcp, McpError, ServerStatus, Status};
use strawberry_spoke::skills::watch::LiveRegistry;
use strawberry_spoke::skills::{CallError, Registry};

use crate::support::mosquitto::Broker;
use crate::support::poll;

fn deps() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps")
}

/// A test dependency, or a failure saying how to install it (never a skip).
fn dep(relative: &str) -> PathBuf {
    let path = deps().join(relative);
    assert!(
        path.exists(),
        "{} is missing; run `bash tests/setup.sh` (or tests/setup-mcp.sh) first",
        path.display()
    );
    path
}

/// The venv's Python: run as `python -m`, since the venv's scripts name the path it
/// was made at in their first line, and a worktree's `target` may be another's.
fn venv_python() -> String {
    dep("mcp-venv/bin/python").display().to_string()
}

/// mcp-server-time as a servers file names a stdio server, with `args` after it.
fn time_server(args: &[&str]) -> Value {
    let mut all = vec!["-m", "mcp_server_time"];
    all.extend(args);
    json!({"command": venv_python(), "args": all})
}

fn everything_server() -> String {
    dep("mcp-npm/node_modules/.bin/mcp-server-everything")
        .display()
        .to_string()
}

/// MCP servers started from a servers file, over a registry with no skill files.
struct Servers {
    rt: tokio::runtime::Runtime,
    live: Arc<LiveRegistry>,
    mcp: Option<Mcp>,
    _dir: tempfile::TempDir,
}

impl Servers {
    fn start(file: Value, tweak: impl FnOnce(&mut McpConfig)) -> Servers {
        Servers::try_start(
            file,
            Registry::new(Vec::new(), HostSettings::default()),
            tweak,
        )
        .expect("the servers start")
    }

    fn try_start(
        file: Value,
        registry: Registry,
        tweak: impl FnOnce(&mut McpConfig),
    ) -> Result<Servers, McpError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mcp.json");
        std::fs::write(&path, file.to_string()).unwrap();
        let mut config = McpConfig {
            config_file: Some(path),
            ..McpConfig::default()
        };
        tweak(&mut config);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let live = Arc::new(LiveRegistry::new(Arc::new(registry)));
        let mcp = {
            let _inside = rt.enter();
            let settings = config.settings().expect("a servers file is configured");
            Mcp::start(&settings, live.clone(), || {}, &Default::default())?
        };
        Ok(Servers {
            rt,
            live,
            mcp: Some(mcp),
            _dir: dir,
        })
    }

    fn registry(&self) -> Arc<Registry> {
        self.live.current()
    }

    /// Waits until `class.function` is in the registry.
    fn wait_function(&self, class: &str, function: &str) {
        poll::wait_until(
            &format!("{class}.{function} to be a skill function"),
            Duration::from_secs(60),
            || {
                self.registry()
                    .class(class)
                    .is_some_and(|c| c.function(function).is_some())
            },
        );
    }

    fn call(&self, class: &str, function: &str, args: &[Value]) -> Result<Value, CallError> {
        self.registry().call(class, function, args)
    }

    /// The status of the server `key`.
    fn status(&self, key: &str) -> ServerStatus {
        let mcp = self.mcp.as_ref().expect("the servers run");
        mcp.status()
            .into_iter()
            .find(|s| s.key == key)
            .expect("a configured server")
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        if let Some(mcp) = self.mcp.take() {
            self.rt.block_on(mcp.shutdown());
        }
    }
}

fn failed(result: Result<Value, CallError>) -> String {
    match result {
        Err(CallError::Failed { message }) => message,
        other => panic!("expected a failed call, got {other:?}"),
    }
}

#[test]
fn a_stdio_server_becomes_a_class_called_positionally_or_by_name() {
    let servers = Servers::start(
        json!({"mcpServers": {"time": time_server(&["--local-timezone=UTC"])}}),
        |_| {},
    );
    servers.wait_function("Time", "convert_time");
    let registry = servers.registry();
    let class = registry.class("Time").unwrap();
    // Signatures from the input schemas: required parameters in the schema's order.
    assert_eq!(
        class.function("get_current_time").unwrap().signature(),
        "get_current_time(timezone: string) -> map"
    );
    let convert = class.function("convert_time").unwrap();
    assert_eq!(
        convert.signature(),
        "convert_time(source_timezone: string, time: string, target_timezone: string) -> map"
    );
    assert!(
        convert.params[1].description.contains("HH:MM"),
        "{:?}",
        convert.params[1]
    );

    // Found by search like any skill.
    let hits = registry.search("convert a time between time zones", 3);
    assert_eq!(hits[0].function.qualified_name(), "Time.convert_time");

    let now = servers
        .call("Time", "get_current_time", &[json!("Asia/Tokyo")])
        .unwrap();
    assert_eq!(now["timezone"], "Asia/Tokyo");

    let named = servers
        .call(
            "Time",
            "convert_time",
            &[json!({"time": "12:00", "target_timezone": "Asia/Tokyo", "source_timezone": "UTC"})],
        )
        .unwrap();
    assert!(
        named["target"]["datetime"]
            .as_str()
            .unwrap()
            .contains("T21:00"),
        "{named}"
    );

    // The server's isError result is the script's error, with the server's message.
    let error = failed(servers.call(
        "Time",
        "convert_time",
        &[json!("Nowhere/Land"), json!("12:00"), json!("UTC")],
    ));
    assert!(
        error.contains("Time.convert_time failed on the MCP server `time`")
            && error.contains("Nowhere/Land"),
        "{error}"
    );
    // Arguments are checked against the signature before the server is asked.
    let error = servers
        .call("Time", "convert_time", &[json!("UTC")])
        .unwrap_err();
    assert!(matches!(error, CallError::Arguments(_)), "{error}");
}

/// A free loopback port.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `mcp-server-everything streamableHttp` on a free port, killed when dropped.
struct HttpServer {
    child: Child,
    url: String,
}

impl HttpServer {
    fn start() -> HttpServer {
        let port = free_port();
        let child = Command::new(everything_server())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        poll::wait_until(
            "the Streamable HTTP server to listen",
            Duration::from_secs(30),
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        );
        HttpServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn streamable_http_server_with_bounds_on_time_and_size() {
    let http = HttpServer::start();
    let servers = Servers::start(
        json!({
            "mcpServers": {"everything": {"url": http.url}},
            "strawberry": {"everything": {"timeout_ms": 1500, "confirm": ["get-sum"]}}
        }),
        |c| c.max_result_bytes = 10_000,
    );
    servers.wait_function("Everything", "get_sum");
    let registry = servers.registry();
    let sum = registry.function("Everything.get_sum").unwrap();
    assert_eq!(sum.signature(), "get_sum(a: float, b: float) -> string");
    assert!(sum.confirm, "the servers file asks for confirmation");
    assert_eq!(
        registry
            .function("Everything.trigger_long_running_operation")
            .unwrap()
            .signature(),
        "trigger_long_running_operation(duration: float = 10, steps: float = 5) -> string"
    );
    assert_eq!(
        servers
            .call("Everything", "get_sum", &[json!(2), json!(3)])
            .unwrap(),
        json!("The sum of 2 and 3 is 5.")
    );
    assert_eq!(
        servers
            .call("Everything", "echo", &[json!({"message": "hi"})])
            .unwrap(),
        json!("Echo: hi")
    );

    // Structured content is the value itself.
    let weather = servers
        .call("Everything", "get_structured_content", &[json!("New York")])
        .unwrap();
    assert!(
        weather.is_object() && weather.get("temperature").is_some(),
        "{weather}"
    );

    // A result over mcp.max_result_bytes is refused whole, with the key to raise.
    let error = failed(servers.call("Everything", "echo", &[json!("x".repeat(20_000))]));
    assert!(error.contains("mcp.max_result_bytes"), "{error}");

    // A call that outlives its own timeout is stopped at it.
    let started = Instant::now();
    let error = servers
        .call(
            "Everything",
            "trigger_long_running_operation",
            &[json!(10), json!(2)],
        )
        .unwrap_err();
    assert!(matches!(error, CallError::Timeout { .. }), "{error}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // The connection is still good.
    assert_eq!(
        servers
            .call("Everything", "echo", &[json!("again")])
            .unwrap(),
        json!("Echo: again")
    );
}

#[test]
fn a_call_is_cancelled_with_its_run() {
    let http = HttpServer::start();
    let servers = Servers::start(
        json!({"mcpServers": {"everything": {"url": http.url}}}),
        |_| {},
    );
    servers.wait_function("Everything", "trigger_long_running_operation");
    let cancel = Cancel::new();
    let canceller = cancel.clone();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        canceller.cancel();
    });
    let started = Instant::now();
    let result = deadline::with_run(Instant::now() + Duration::from_secs(60), &cancel, || {
        servers.call(
            "Everything",
            "trigger_long_running_operation",
            &[json!(20), json!(2)],
        )
    });
    stopper.join().unwrap();
    let error = failed(result);
    assert!(error.contains("cancelled"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // And a run's total time bounds a call with a longer timeout of its own.
    let result = deadline::with_run(
        Instant::now() + Duration::from_millis(400),
        &Cancel::new(),
        || {
            servers.call(
                "Everything",
                "trigger_long_running_operation",
                &[json!(20), json!(2)],
            )
        },
    );
    let error = failed(result);
    assert!(error.contains("sandbox.total_timeout_ms"), "{error}");
}

/// The process whose pid `file` holds.
fn pid_in(file: &Path) -> i32 {
    poll::wait_for(
        "the server to write its pid",
        Duration::from_secs(30),
        || std::fs::read_to_string(file).ok()?.trim().parse().ok(),
    )
}

fn alive(pid: i32) -> bool {
    // Zombies count as gone: only the daemon could reap them.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')))
}

#[test]
fn a_server_killed_mid_call_fails_the_call_and_is_restarted() {
    let pids = tempfile::tempdir().unwrap();
    let pid_file = pids.path().join("pid");
    // The real server, started through a shell that tells the test its pid.
    let servers = Servers::start(
        json!({"mcpServers": {"everything": {
            "command": "sh",
            "args": ["-c", format!("echo $$ > {}; exec {} stdio", pid_file.display(), everything_server())],
            "env": {"GREETING": "hello"}
        }}}),
        |_| {},
    );
    servers.wait_function("Everything", "echo");

    // A clean environment: what the MCP SDKs pass on, plus the server's `env`.
    let env = servers.call("Everything", "get_env", &[]).unwrap();
    let env: Value = serde_json::from_str(env.as_str().unwrap()).unwrap();
    let env = env.as_object().unwrap();
    assert_eq!(env["GREETING"], "hello");
    let allowed = [
        "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "GREETING", "PWD", "SHLVL", "_",
    ];
    let extra: Vec<&String> = env
        .keys()
        .filter(|k| !allowed.contains(&k.as_str()))
        .collect();
    assert!(extra.is_empty(), "the server inherited {extra:?}");

    let first = pid_in(&pid_file);
    std::fs::remove_file(&pid_file).unwrap();
    let caller = {
        let live = servers.live.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let result = live.current().call(
                "Everything",
                "trigger_long_running_operation",
                &[json!(20), json!(2)],
            );
            (result, started.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on the server's pid, which the test read from the server itself.
    unsafe {
        libc::kill(first, libc::SIGKILL);
    }
    let (result, took) = caller.join().unwrap();
    let error = failed(result);
    assert!(error.contains("`everything`"), "{error}");
    assert!(took < Duration::from_secs(10), "the call waited {took:?}");

    // Meanwhile calls fail clearly; then the server is back.
    let meanwhile = failed(servers.call("Everything", "echo", &[json!("x")]));
    assert!(
        meanwhile.contains("the MCP server `everything` is not running")
            || meanwhile.contains("the MCP server `everything` is starting"),
        "{meanwhile}"
    );
    let second = pid_in(&pid_file);
    assert_ne!(first, second);
    poll::wait_until(
        "the restarted server to answer",
        Duration::from_secs(60),
        || servers.call("Everything", "echo", &[json!("back")]).ok() == Some(json!("Echo: back")),
    );

    // Stopped with the daemon.
    drop(servers);
    poll::wait_until("the server to be stopped", Duration::from_secs(10), || {
        !alive(second)
    });
}

#[test]
fn a_server_that_never_answers_does_not_hold_up_the_spoke() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    // Reads its input and never answers: `initialize` goes unanswered.
    let hang = format!("echo $$ > {}; exec cat > /dev/null", pid_file.display());
    let file = dir.path().join("mcp.json");
    std::fs::write(
        &file,
        json!({"mcpServers": {
            "hang": {"command": "sh", "args": ["-c", hang]},
            "time": time_server(&[])
        }})
        .to_string(),
    )
    .unwrap();
    let skills = dir.path().join("skills");
    std::fs::create_dir(&skills).unwrap();
    let config_file = dir.path().join("config.toml");
    std::fs::write(
        &config_file,
        format!(
            "[device]\nname = \"test\"\ndata_dir = \"{}\"\n[skills]\ndir = \"{}\"\n[mcp]\nconfig_file = \"{}\"\nstart_timeout_ms = 3000\n",
            dir.path().join("data").display(),
            skills.display(),
            file.display()
        ),
    )
    .unwrap();
    let config = strawberry_spoke::config::Config::load(
        Some(&config_file),
        std::iter::empty::<(String, String)>(),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let spoke = rt
        .block_on(async {
            let parts = strawberry_spoke::app::Parts::new(&config)?;
            strawberry_spoke::daemon::Spoke::start(
                &parts,
                Arc::new(strawberry_spoke::skills::policy::NeverConfirm),
                tokio_util::sync::CancellationToken::new(),
            )
        })
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let hung = pid_in(&pid_file);
    // The other server comes up; the hanging one is given up on at its start timeout.
    poll::wait_until("the time server's class", Duration::from_secs(60), || {
        spoke.skills.current().class("Time").is_some()
    });
    poll::wait_until(
        "the hanging server to be given up on",
        Duration::from_secs(30),
        || !alive(hung),
    );
    assert!(spoke.skills.current().class("Hang").is_none());
    let second = poll::wait_for("it to be tried again", Duration::from_secs(30), || {
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        (pid != hung).then_some(pid)
    });
    rt.block_on(spoke.shutdown());
    poll::wait_until(
        "the servers to stop with the spoke",
        Duration::from_secs(10),
        || !alive(second),
    );
}

#[test]
fn a_server_named_like_a_skill_class_is_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("time.rhai"),
        "//! The time.\n//!\n//! @class Time\n\n/// Now.\n///\n/// @return string  Now.\nfn now() {\n    \"now\"\n}\n",
    )
    .unwrap();
    let (registry, errors) = Registry::load(dir.path(), &HostSettings::default());
    assert!(errors.is_empty(), "{errors:?}");
    let result = Servers::try_start(
        json!({"mcpServers": {"time": time_server(&[])}}),
        registry,
        |_| {},
    );
    let Err(error) = result else {
        panic!("the clash was not refused")
    };
    let error = error.to_string();
    assert!(
        error.contains("`time`") && error.contains("`Time`") && error.contains("time.rhai"),
        "{error}"
    );
}

#[test]
fn model_code_in_the_sandbox_calls_an_mcp_tool() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcp.json");
    std::fs::write(
        &file,
        json!({"mcpServers": {"time": time_server(&[])}}).to_string(),
    )
    .unwrap();
    let spoke = |args: &[&str]| {
        local_spoke(dir.path(), &file, args)
            .env(
                "STRAWBERRY_SPOKE__HUB__ENDPOINTS",
                "[{url = \"http://127.0.0.1:9\", model = \"scripted\"}]",
            )
            .output()
            .unwrap()
    };
    let run = |code: &str| spoke(&["exec", "-e", code]);
    let out = run(
        r#"let found = device.search_skills("what time is it in Tokyo");
let t = device.Time.convert_time(#{source_timezone: "UTC", time: "12:00", target_timezone: "Asia/Tokyo"});
`${found[0].class} ${t.target.datetime}`"#,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("Time ") && stdout.contains("T21:00"),
        "{stdout}"
    );

    // The model sees the server's functions in its prompt, like any skill's.
    let out = spoke(&["prompt", "what time is it in Tokyo"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains(
            "convert_time(source_timezone: string, time: string, target_timezone: string) -> map"
        ),
        "{system}"
    );

    let out = run(r#"device.Time.get_current_time("Nowhere/Land")"#);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("failed on the MCP server `time`") && stderr.contains("Nowhere/Land"),
        "{stderr}"
    );
}

/// A spoke's folder with a config naming `broker` and the servers file `servers`.
fn spoke_dir(name: &str, broker: &str, servers: Option<Value>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("skills")).unwrap();
    let mut config = format!(
        "[device]\nname = \"{name}\"\ndata_dir = \"data\"\n[skills]\ndir = \"skills\"\n[mqtt]\nbroker = \"{broker}\"\ndevice_id = \"{name}\"\n"
    );
    if let Some(servers) = servers {
        std::fs::write(dir.path().join("mcp.json"), servers.to_string()).unwrap();
        config.push_str("[mcp]\nconfig_file = \"mcp.json\"\n");
    }
    std::fs::write(dir.path().join("config.toml"), config).unwrap();
    dir
}

/// The command line of a spoke without a config file, its folders in `dir` (an empty
/// `skills` made here) and its MCP servers in `servers_file`.
fn local_spoke(dir: &Path, servers_file: &Path, args: &[&str]) -> Command {
    let skills = dir.join("skills");
    std::fs::create_dir_all(&skills).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strawberry-spoke"));
    cmd.args(args)
        .env("STRAWBERRY_SPOKE__SKILLS__DIR", &skills)
        .env("STRAWBERRY_SPOKE__DEVICE__DATA_DIR", dir.join("data"))
        .env("STRAWBERRY_SPOKE__MCP__CONFIG_FILE", servers_file)
        .env("STRAWBERRY_SPOKE__LOG__LEVEL", "warn")
        .env_remove("RUST_LOG");
    cmd
}

fn spoke_command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strawberry-spoke"));
    cmd.arg("--config")
        .arg(dir.join("config.toml"))
        .args(args)
        .env_remove("RUST_LOG")
        .env("STRAWBERRY_SPOKE__LOG__LEVEL", "warn")
        .stdin(Stdio::null());
    cmd
}

#[test]
fn an_opened_server_is_registered_and_called_from_another_room() {
    let broker = Broker::start();
    let kitchen = spoke_dir(
        "kitchen",
        &broker.url(),
        Some(json!({
            "mcpServers": {"time": time_server(&[])},
            "strawberry": {"time": {"remote": ["get_current_time"]}}
        })),
    );
    let mut serve = spoke_command(kitchen.path(), &["serve"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Only the opened tool is in the registration, once the server is up.
    let text = broker.wait_retained(
        "strawberry/devices/kitchen/skills",
        Duration::from_secs(60),
        |t| t.contains("\"Time\""),
    );
    let registration: Value = serde_json::from_str(&text).unwrap();
    let class = registration["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "Time")
        .unwrap();
    let names: Vec<&str> = class["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["get_current_time"]);

    let living = spoke_dir("living", &broker.url(), None);
    let out = spoke_command(
        living.path(),
        &[
            "exec",
            "-e",
            r#"devices["kitchen"].Time.get_current_time("Asia/Tokyo").timezone"#,
        ],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Asia/Tokyo");
    // SAFETY: a signal to our own child process.
    assert_eq!(unsafe { libc::kill(serve.id() as i32, libc::SIGTERM) }, 0);
    assert!(serve.wait().unwrap().success());
}

/// A server on the official Python SDK whose tool `lamp` comes and goes, each time
/// with a `notifications/tools/list_changed`.
const LAMPS: &str = r#"
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("lamps")


def lamp(room: str) -> str:
    """Turns on the lamp in a room."""
    return f"the lamp in the {room} is on"


@server.tool()
async def install_lamp(ctx: Context) -> str:
    """Adds the tool `lamp`."""
    server.add_tool(lamp)
    await ctx.session.send_tool_list_changed()
    return "installed"


@server.tool()
async def remove_lamp(ctx: Context) -> str:
    """Removes the tool `lamp`."""
    server.remove_tool("lamp")
    await ctx.session.send_tool_list_changed()
    return "removed"


server.run()
"#;

#[test]
fn the_class_follows_a_tool_list_the_server_says_changed() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("lamps.py");
    std::fs::write(&script, LAMPS).unwrap();
    let servers = Servers::start(
        json!({"mcpServers": {"lamps": {
            "command": venv_python(),
            "args": [script.display().to_string()]
        }}}),
        |_| {},
    );
    servers.wait_function("Lamps", "install_lamp");
    let has_lamp = || {
        servers
            .registry()
            .class("Lamps")
            .is_some_and(|c| c.function("lamp").is_some())
    };
    assert!(!has_lamp());
    servers.call("Lamps", "install_lamp", &[]).unwrap();
    // The new tool is a function, found by search and called like the others.
    servers.wait_function("Lamps", "lamp");
    let registry = servers.registry();
    assert_eq!(
        registry.function("Lamps.lamp").unwrap().signature(),
        "lamp(room: string) -> map"
    );
    assert_eq!(
        registry.search("turn on the lamp in the kitchen", 1)[0]
            .function
            .qualified_name(),
        "Lamps.lamp"
    );
    let on = servers.call("Lamps", "lamp", &[json!("kitchen")]).unwrap();
    assert_eq!(on["result"], "the lamp in the kitchen is on", "{on}");
    // And a tool that goes away leaves the class.
    servers.call("Lamps", "remove_lamp", &[]).unwrap();
    poll::wait_until(
        "the lamp to leave the class",
        Duration::from_secs(60),
        || !has_lamp(),
    );
    assert!(servers.registry().class("Lamps").is_some());
}

/// A server that says why it cannot start, in a long line among others, and exits.
const BROKEN: &str = "echo starting >&2; head -c 100000 /dev/zero | tr '\\0' x >&2; echo >&2; echo 'error: TIME_API_KEY is not set; export it' >&2; exit 3";

#[test]
fn a_servers_stderr_is_logged_within_bounds_and_its_last_words_say_why_it_stopped() {
    // A real server behind 5,000 lines of standard error.
    let chatty = format!("seq 1 5000 >&2; exec {} -m mcp_server_time", venv_python());
    let servers = Servers::start(
        json!({"mcpServers": {
            "chatty": {"command": "sh", "args": ["-c", chatty]},
            "broken": {"command": "sh", "args": ["-c", BROKEN]}
        }}),
        |_| {},
    );
    servers.wait_function("Chatty", "get_current_time");
    let status = poll::wait_for(
        "the chatty server's stderr to be read",
        Duration::from_secs(30),
        || {
            let status = servers.status("chatty");
            (status.stderr_lines >= 5000).then_some(status)
        },
    );
    // Every line is read (the server never blocks on a full pipe), a minute's share
    // of them reaches the log.
    assert_eq!(status.stderr_lines, 5000);
    assert_eq!(
        status.stderr_logged,
        u64::from(strawberry_spoke::mcp::server::STDERR_LINES_PER_MINUTE)
    );
    assert!(matches!(status.state, Status::Up { .. }), "{status:?}");
    let now = servers
        .call("Chatty", "get_current_time", &[json!("UTC")])
        .unwrap();
    assert_eq!(now["timezone"], "UTC");

    // The server that stopped is down with its own last words, shortened.
    let error = poll::wait_for(
        "the broken server to be down",
        Duration::from_secs(30),
        || match servers.status("broken").state {
            Status::Down { error } => Some(error),
            _ => None,
        },
    );
    assert!(
        error.contains("starting") && error.contains("error: TIME_API_KEY is not set; export it"),
        "{error}"
    );
    assert!(error.len() < 4_000, "{} bytes: {error}", error.len());
}

#[test]
fn skills_commands_show_mcp_classes_and_the_servers_that_are_down() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcp.json");
    std::fs::write(
        &file,
        json!({"mcpServers": {
            "time": time_server(&[]),
            "broken": {"command": "sh", "args": ["-c", BROKEN]}
        }})
        .to_string(),
    )
    .unwrap();
    let spoke = |args: &[&str]| local_spoke(dir.path(), &file, args).output().unwrap();
    let list = spoke(&["skills", "list"]);
    let stdout = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success(), "{stdout}");
    assert!(
        stdout.contains("\n  convert_time(source_timezone: string, time: string, target_timezone: string) -> map  "),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&list.stderr);
    assert!(stderr.contains("MCP server `broken`"), "{stderr}");

    let info = spoke(&["skills", "info", "Time.get_current_time"]);
    assert!(
        String::from_utf8_lossy(&info.stdout)
            .starts_with("Time.get_current_time(timezone: string) -> map"),
        "{}",
        String::from_utf8_lossy(&info.stderr)
    );
    let call = spoke(&[
        "skills",
        "call",
        "Time.get_current_time",
        r#"["Asia/Tokyo"]"#,
    ]);
    let value: Value = serde_json::from_slice(&call.stdout).unwrap();
    assert_eq!(value["timezone"], "Asia/Tokyo");

    // `check` counts a server that is down as an error and says why.
    let check = spoke(&["skills", "check"]);
    assert_eq!(check.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        stdout.contains("1 skill classes, 2 functions loaded, 1 error(s)"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(
        stderr.contains("MCP server `broken`") && stderr.contains("TIME_API_KEY is not set"),
        "{stderr}"
    );
}
