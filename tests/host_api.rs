//! The host API as skill code sees it: real Rhai scripts calling real processes, a real
//! HTTP server on loopback, real files and the real clock.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use jiff::tz::TimeZone;
use rhai::{Dynamic, Engine, Map};
use strawberry_spoke::deadline;
use strawberry_spoke::host::HostSettings;

use crate::support::skill;
use crate::support::skill::field;

struct Host {
    engine: Engine,
    _data: tempfile::TempDir,
}

fn host() -> Host {
    host_with(|_| {})
}

fn host_with(change: impl FnOnce(&mut HostSettings)) -> Host {
    let data = tempfile::tempdir().unwrap();
    let mut settings = skill::settings(data.path());
    change(&mut settings);
    let (engine, _) = skill::engine("TestSkill", settings);
    Host {
        engine,
        _data: data,
    }
}

impl Host {
    /// Runs `script` as one skill call lasting at most `limit`.
    fn run_for(&self, limit: Duration, script: &str) -> Result<Dynamic, String> {
        deadline::with_deadline(Instant::now() + limit, || {
            self.engine
                .eval::<Dynamic>(script)
                .map_err(|e| e.to_string())
        })
    }

    fn run(&self, script: &str) -> Result<Dynamic, String> {
        self.run_for(Duration::from_secs(10), script)
    }

    fn ok(&self, script: &str) -> Dynamic {
        self.run(script)
            .unwrap_or_else(|e| panic!("{script}\nfailed: {e}"))
    }

    fn err(&self, script: &str) -> String {
        match self.run(script) {
            Ok(v) => panic!("{script}\nshould fail but gave {v}"),
            Err(e) => e,
        }
    }
}

fn assert_contains(text: &str, part: &str) {
    assert!(text.contains(part), "expected {part:?} in:\n{text}");
}

// ---- command ----

#[test]
fn command_reports_code_stdout_and_stderr() {
    let h = host();
    let r = h.ok(r#"command("sh", ["-c", "echo out; echo err >&2; exit 3"])"#);
    assert_eq!(field::<i64>(&r, "code"), 3);
    assert_eq!(field::<String>(&r, "stdout"), "out\n");
    assert_eq!(field::<String>(&r, "stderr"), "err\n");
    assert!(!field::<bool>(&r, "truncated"));
    // No shell: metacharacters in arguments are just text.
    let r = h.ok(r#"command("echo", ["a; rm -rf /", "$HOME", 42])"#);
    assert_eq!(field::<String>(&r, "stdout"), "a; rm -rf / $HOME 42\n");
}

#[test]
fn command_feeds_stdin() {
    let h = host();
    let r = h.ok(r#"command("tr", ["a-z", "A-Z"], #{stdin: "hello"})"#);
    assert_eq!(field::<String>(&r, "stdout"), "HELLO");
    assert_eq!(field::<i64>(&r, "code"), 0);
}

#[test]
fn command_not_found_says_how_to_install() {
    let h = host();
    let e = h.err(r#"command("no-such-program-here", [])"#);
    assert_contains(&e, "command `no-such-program-here` not found on PATH");
    // A known program gets its Debian package named (vcgencmd only exists on a Pi).
    if std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .all(|d| !d.join("vcgencmd").exists())
    {
        let e = h.err(r#"command("vcgencmd", ["measure_temp"])"#);
        assert_contains(
            &e,
            "command `vcgencmd` not found on PATH; install it (Debian: apt install libraspberrypi-bin)",
        );
    }
    let e = h.err(r#"command("echo", [], #{timeout: 5})"#);
    assert_contains(
        &e,
        "command: unknown option `timeout`; known options: timeout_ms, stdin",
    );
}

#[test]
fn command_timeout_kills_the_child_and_what_it_started() {
    let h = host();
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let script = format!(
        r#"command("sh", ["-c", "echo $$ > {p}; sleep 30 & echo $! >> {p}; wait"], #{{timeout_ms: 300}})"#,
        p = pids.display()
    );
    let start = Instant::now();
    let e = h.err(&script);
    let took = start.elapsed();
    assert_contains(&e, "command `sh` timed out after 300 ms and was killed");
    assert_contains(
        &e,
        "raise it with #{timeout_ms: ...} or settings.command_timeout",
    );
    assert!(took < Duration::from_millis(1000), "took {took:?}");
    let pids = std::fs::read_to_string(&pids).unwrap();
    for pid in pids.split_whitespace() {
        assert!(gone(pid), "process {pid} survived the timeout");
    }
}

/// Whether a process is dead: no longer there, or a zombie waiting for its new parent
/// (a container's init may not reap orphans).
fn gone(pid: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(')').next().map(|r| r.trim().to_string()));
        match state {
            None => return true,
            Some(s) if s.starts_with('Z') => return true,
            Some(_) if Instant::now() > until => return false,
            Some(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[test]
fn command_is_bounded_by_the_call_deadline() {
    let h = host();
    let start = Instant::now();
    let e = h
        .run_for(Duration::from_millis(300), r#"command("sleep", ["10"])"#)
        .unwrap_err();
    assert_contains(&e, "command `sleep` timed out after");
    assert_contains(
        &e,
        "the time left in this skill call; settings.call_timeout",
    );
    assert!(start.elapsed() < Duration::from_millis(1000));
}

#[test]
fn command_large_output_neither_deadlocks_nor_grows_unbounded() {
    let h = host();
    // 3 MB on stdout and 300 kB on stderr at once: far more than a pipe buffer holds.
    let r = h.ok(
        r#"command("sh", ["-c", "head -c 300000 /dev/zero >&2; head -c 3000000 /dev/zero | tr '\\0' a"])"#,
    );
    assert_eq!(field::<i64>(&r, "code"), 0);
    let out = field::<String>(&r, "stdout");
    assert_eq!(out.len(), 1024 * 1024);
    assert!(out.bytes().all(|b| b == b'a'));
    assert_eq!(field::<String>(&r, "stderr").len(), 300_000);
    assert!(field::<bool>(&r, "truncated"));
}

// ---- HTTP ----

/// A tiny HTTP/1.1 server on loopback, one thread per connection, `Connection: close`.
fn serve() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || answer(stream));
        }
    });
    format!("http://{addr}")
}

fn answer(mut stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end().to_string();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').unwrap();
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let len: usize = header("content-length").parse().unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let (status, reply): (&str, Vec<u8>) = match path.as_str() {
        "/json" => ("200 OK", br#"{"a": 1, "b": [true, null, 2.5]}"#.to_vec()),
        "/echo" => (
            "200 OK",
            serde_json::json!({
                "method": method,
                "content_type": header("content-type"),
                "token": header("x-token"),
                "body": String::from_utf8_lossy(&body),
            })
            .to_string()
            .into_bytes(),
        ),
        "/big" => ("200 OK", vec![b'x'; 2 * 1024 * 1024]),
        "/slow" => {
            thread::sleep(Duration::from_secs(3));
            ("200 OK", b"late".to_vec())
        }
        _ => ("404 Not Found", b"nope".to_vec()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reply.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&reply);
}

#[test]
fn http_get_parses_json_and_keeps_non_2xx_as_results() {
    let url = serve();
    let h = host();
    let r = h.ok(&format!(r#"http_get("{url}/json")"#));
    assert_eq!(field::<i64>(&r, "status"), 200);
    let json: Map = field(&r, "json");
    assert_eq!(json["a"].as_int(), Ok(1));
    let b = json["b"].clone().into_array().unwrap();
    assert_eq!(b[0].as_bool(), Ok(true));
    assert!(b[1].is_unit());
    assert_eq!(b[2].as_float(), Ok(2.5));

    let r = h.ok(&format!(r#"http_get("{url}/missing")"#));
    assert_eq!(field::<i64>(&r, "status"), 404);
    assert_eq!(field::<String>(&r, "body"), "nope");
    assert!(field::<Dynamic>(&r, "json").is_unit());
}

#[test]
fn http_post_sends_maps_as_json_and_strings_as_text() {
    let url = serve();
    let h = host();
    let r = h.ok(&format!(
        r#"http_post("{url}/echo", #{{ on: true, level: 3 }}, #{{ headers: #{{ "X-Token": "abc" }} }})"#
    ));
    let echo: Map = field(&r, "json");
    assert_eq!(echo["method"].to_string(), "POST");
    assert_eq!(echo["content_type"].to_string(), "application/json");
    assert_eq!(echo["token"].to_string(), "abc");
    let sent: serde_json::Value = serde_json::from_str(&echo["body"].to_string()).unwrap();
    assert_eq!(sent, serde_json::json!({"on": true, "level": 3}));

    let r = h.ok(&format!(r#"http_post("{url}/echo", "plain words")"#));
    let echo: Map = field(&r, "json");
    assert_eq!(
        echo["content_type"].to_string(),
        "text/plain; charset=utf-8"
    );
    assert_eq!(echo["body"].to_string(), "plain words");

    let r = h.ok(&format!(
        r#"http_get("{url}/echo", #{{ headers: #{{ "x-token": "t2" }} }})"#
    ));
    let echo: Map = field(&r, "json");
    assert_eq!(echo["method"].to_string(), "GET");
    assert_eq!(echo["token"].to_string(), "t2");
}

#[test]
fn http_response_over_the_cap_is_an_error() {
    let url = serve();
    let h = host();
    let e = h.err(&format!(r#"http_get("{url}/big")"#));
    assert_contains(
        &e,
        &format!(
            "http_get {url}/big: response larger than 1048576 bytes (settings.http_max_bytes)"
        ),
    );
    let h = host_with(|s| s.http_max_bytes = 4 * 1024 * 1024);
    let r = h.ok(&format!(r#"http_get("{url}/big")"#));
    assert_eq!(field::<String>(&r, "body").len(), 2 * 1024 * 1024);
}

#[test]
fn http_timeouts() {
    let url = serve();
    let h = host();
    let start = Instant::now();
    let e = h.err(&format!(r#"http_get("{url}/slow", #{{timeout_ms: 300}})"#));
    assert_contains(&e, &format!("http_get {url}/slow: timed out after 300 ms"));
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "{:?}",
        start.elapsed()
    );

    let h = host_with(|s| s.http_timeout = Duration::from_millis(400));
    let e = h.err(&format!(r#"http_post("{url}/slow", ())"#));
    assert_contains(&e, &format!("http_post {url}/slow: timed out after 400 ms"));

    let start = Instant::now();
    let e = host()
        .run_for(
            Duration::from_millis(300),
            &format!(r#"http_get("{url}/slow")"#),
        )
        .unwrap_err();
    assert_contains(
        &e,
        "(the time left in this skill call; settings.call_timeout)",
    );
    assert!(start.elapsed() < Duration::from_millis(1500));
}

#[test]
fn http_connection_failures_name_the_url() {
    // Bind and drop a listener: nothing listens on that port any more.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = host().err(&format!(r#"http_get("http://127.0.0.1:{port}/x")"#));
    assert_contains(&e, &format!("http_get http://127.0.0.1:{port}/x: "));
    let e = host().err(r#"http_get("not a url")"#);
    assert_contains(&e, "http_get not a url: ");
}

// ---- storage ----

#[test]
fn storage_round_trips_values_and_persists() {
    let data = tempfile::tempdir().unwrap();
    let (engine, _) = skill::engine("TestSkill", skill::settings(data.path()));
    let r = engine
        .eval::<Dynamic>(
            r#"
            let before = storage_get("k");
            storage_set("k", #{ a: [1, 2.5, "x", true, ()], n: #{ deep: "yes" } });
            storage_set("counter", 41);
            storage_set("counter", storage_get("counter", 0) + 1);
            #{
                before: before,
                missing_default: storage_get("missing", "dflt"),
                k: to_json(storage_get("k")),
                counter: storage_get("counter"),
                keys: storage_keys(),
                removed: storage_remove("counter"),
                removed_again: storage_remove("counter"),
            }
            "#,
        )
        .unwrap();
    assert!(field::<Dynamic>(&r, "before").is_unit());
    assert_eq!(field::<String>(&r, "missing_default"), "dflt");
    let k: serde_json::Value = serde_json::from_str(&field::<String>(&r, "k")).unwrap();
    assert_eq!(
        k,
        serde_json::json!({"a": [1, 2.5, "x", true, null], "n": {"deep": "yes"}})
    );
    assert_eq!(field::<i64>(&r, "counter"), 42);
    assert_eq!(skill::strings(&field(&r, "keys")), ["counter", "k"]);
    assert!(field::<bool>(&r, "removed"));
    assert!(!field::<bool>(&r, "removed_again"));

    let (engine, _) = skill::engine("TestSkill", skill::settings(data.path()));
    let deep = engine.eval::<String>(r#"storage_get("k").n.deep"#).unwrap();
    assert_eq!(deep, "yes");
    // Another class has its own file.
    let (other, _) = skill::engine("OtherSkill", skill::settings(data.path()));
    assert!(
        other
            .eval::<Dynamic>(r#"storage_get("k")"#)
            .unwrap()
            .is_unit()
    );
    assert!(Path::new(&data.path().join("skills/TestSkill.jsonl")).exists());
}

#[test]
fn storage_refuses_values_that_are_not_data() {
    let e = host().err(r#"storage_set("f", |x| x + 1)"#);
    assert_contains(&e, "storage_set(\"f\"): a Fn cannot be turned into JSON");
}

// ---- time ----

#[test]
fn time_functions_agree_with_jiff() {
    let h = host();
    let before = Timestamp::now().as_millisecond();
    let now_ms = h.ok("now_ms()").as_int().unwrap();
    let now = h.ok("now()").as_float().unwrap();
    let after = Timestamp::now().as_millisecond();
    assert!(before <= now_ms && now_ms <= after);
    assert!((before as f64 / 1000.0 - 0.001..=after as f64 / 1000.0 + 0.001).contains(&now));

    // A fixed instant: 2023-11-14T22:13:20Z.
    let p = h.ok(r#"time_parts(1700000000, "Asia/Kolkata")"#);
    let z = Timestamp::from_second(1_700_000_000)
        .unwrap()
        .to_zoned(TimeZone::get("Asia/Kolkata").unwrap());
    assert_eq!(field::<i64>(&p, "year"), i64::from(z.year()));
    assert_eq!(field::<i64>(&p, "month"), 11);
    assert_eq!(field::<i64>(&p, "day"), 15);
    assert_eq!(field::<i64>(&p, "hour"), 3);
    assert_eq!(field::<i64>(&p, "minute"), 43);
    assert_eq!(field::<i64>(&p, "second"), 20);
    assert_eq!(field::<String>(&p, "weekday"), "Wednesday");
    assert_eq!(field::<i64>(&p, "weekday_num"), 3);
    assert_eq!(field::<String>(&p, "tz"), "Asia/Kolkata");
    assert_eq!(field::<String>(&p, "offset"), "+05:30");
    assert_eq!(field::<i64>(&p, "offset_seconds"), 19800);
    assert_eq!(field::<i64>(&p, "unix"), 1_700_000_000);
    let p = h.ok(r#"time_parts(1700000000, "America/St_Johns")"#);
    assert_eq!(field::<String>(&p, "offset"), "-03:30");

    let p = h.ok(r#"time_parts("UTC")"#);
    let unix = field::<i64>(&p, "unix");
    assert!((before / 1000..=after / 1000 + 1).contains(&unix));

    let s = h
        .ok(r#"format_time(0, "%Y-%m-%d %H:%M:%S", "UTC")"#)
        .to_string();
    assert_eq!(s, "1970-01-01 00:00:00");
    let s = h
        .ok(r#"format_time(1700000000.5, "%A %-d %B %Y, %H:%M %Z", "America/New_York")"#)
        .to_string();
    assert_eq!(s, "Tuesday 14 November 2023, 17:13 EST");
}

#[test]
fn time_errors_name_the_problem() {
    let h = host();
    let e = h.err(r#"time_parts("Europe/Pari")"#);
    assert_contains(
        &e,
        "unknown time zone `Europe/Pari`; use an IANA name such as Europe/Paris",
    );
    let e = h.err(r#"format_time(0, "%Y", "Mars/Olympus")"#);
    assert_contains(&e, "unknown time zone `Mars/Olympus`");
    let e = h.err(r#"format_time(0, "%K", "UTC")"#);
    assert_contains(&e, "format_time: bad format `%K`");
}

#[test]
fn sleep_ms_sleeps_within_the_call_deadline() {
    let h = host();
    let start = Instant::now();
    assert!(h.ok("sleep_ms(60)").is_unit());
    assert!(start.elapsed() >= Duration::from_millis(60));

    let start = Instant::now();
    let e = h
        .run_for(Duration::from_millis(200), "sleep_ms(5000)")
        .unwrap_err();
    assert_contains(&e, "sleep_ms(5000) would outlast this skill call");
    // Refused up front: it returns before the call's own deadline would have ended it.
    assert!(start.elapsed() < Duration::from_millis(200));
    assert_contains(
        &h.err("sleep_ms(-1)"),
        "sleep_ms(-1): the duration cannot be negative",
    );
}

// ---- files and JSON ----

#[test]
fn files_read_list_exists_with_a_size_cap() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.txt"), "bee").unwrap();
    std::fs::write(dir.path().join("a.txt"), "x".repeat(2000)).unwrap();
    let h = host_with(|s| s.file_max_bytes = 1000);
    let d = dir.path().display();
    assert_eq!(
        h.ok(&format!(r#"read_file("{d}/b.txt")"#)).to_string(),
        "bee"
    );
    let e = h.err(&format!(r#"read_file("{d}/a.txt")"#));
    assert_contains(
        &e,
        &format!("read_file {d}/a.txt: file larger than 1000 bytes (settings.file_max_bytes)"),
    );
    let e = h.err(&format!(r#"read_file("{d}/nope")"#));
    assert_contains(
        &e,
        &format!("read_file {d}/nope: No such file or directory"),
    );
    assert_eq!(
        skill::strings(&h.ok(&format!(r#"list_dir("{d}")"#))),
        ["a.txt", "b.txt"]
    );
    assert!(
        h.ok(&format!(r#"file_exists("{d}/a.txt")"#))
            .as_bool()
            .unwrap()
    );
    assert!(
        !h.ok(&format!(r#"file_exists("{d}/c.txt")"#))
            .as_bool()
            .unwrap()
    );
    // /proc files report size 0; the cap is enforced by reading, so they still work.
    let up = h.ok(r#"read_file("/proc/uptime")"#).to_string();
    assert!(up.split_whitespace().count() == 2, "{up}");
}

#[test]
fn json_round_trip() {
    let h = host();
    let r = h.ok(r#"let v = parse_json(`{"a": [1, 2.5, "x", null, {"b": false}]}`); v.a"#);
    let a = r.into_array().unwrap();
    assert_eq!(a[0].as_int(), Ok(1));
    assert_eq!(a[1].as_float(), Ok(2.5));
    assert_eq!(a[2].to_string(), "x");
    assert!(a[3].is_unit());
    let s = h
        .ok(r#"to_json(#{ b: true, n: [1, ()], s: "q\"" })"#)
        .to_string();
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"b": true, "n": [1, null], "s": "q\""})
    );
    let e = h.err(r#"parse_json("{bad")"#);
    assert_contains(&e, "parse_json: key must be a string at line 1 column 2");
}

#[test]
fn logging_accepts_any_value() {
    let h = host();
    let r = h.ok(r#"log_debug("d"); log_info(#{ a: 1 }); log_warn(3); log_error("e"); 7"#);
    assert_eq!(r.as_int(), Ok(7));
}
