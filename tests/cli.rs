//! The command line as a newcomer uses it: the real binary, a skills folder on disk,
//! exit statuses and messages.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::support::{cpu, llm, poll, stt};

const HELLO_SKILL: &str = r#"//! Greets people by name.

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
"#;

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

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn run_with_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn dropped_skill_is_listed_and_callable_from_exec() {
    let spoke = Spoke::new().with_skill("greeter.rhai", HELLO_SKILL);
    let list = spoke.run(&["skills", "list"]);
    assert!(list.status.success(), "{}", stderr(&list));
    assert!(stdout(&list).contains("GreeterSkill"), "{}", stdout(&list));
    assert!(
        stdout(&list).contains("hello(name: string) -> string"),
        "{}",
        stdout(&list)
    );

    let out = spoke.run(&["exec", "-e", r#"print(device.GreeterSkill.hello("x"))"#]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Hello, x!\n");
}

#[test]
fn exec_prints_output_then_value() {
    let spoke = Spoke::new().with_skill("greeter.rhai", HELLO_SKILL);
    let out = spoke.run(&["exec", "-e", "print(\"a\"); 40 + 2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "a\n42\n");
}

#[test]
fn exec_reads_file_and_stdin() {
    let spoke = Spoke::new().with_skill("greeter.rhai", HELLO_SKILL);
    let script = spoke.skills.path().join("script.txt");
    std::fs::write(&script, "device.GreeterSkill.hello(#{name: \"file\"})").unwrap();
    let out = spoke.run(&["exec", script.to_str().unwrap()]);
    assert_eq!(stdout(&out), "Hello, file!\n", "{}", stderr(&out));

    let out = spoke.run_with_stdin(&["exec", "-"], "device.GreeterSkill.hello(\"stdin\")");
    assert_eq!(stdout(&out), "Hello, stdin!\n", "{}", stderr(&out));
}

#[test]
fn exec_script_errors_exit_2_with_position() {
    let spoke = Spoke::new();
    let out = spoke.run(&["exec", "-e", "let x = 1;\nlet y = ;"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("line 2"), "{}", stderr(&out));

    let out = spoke.run(&["exec", "-e", "throw \"boom\""]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("boom"), "{}", stderr(&out));

    let out = spoke.run(&["exec", "-e", "loop {}"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("limit"), "{}", stderr(&out));
}

#[test]
fn exec_wrong_arguments_name_the_signature() {
    let spoke = Spoke::new().with_skill("greeter.rhai", HELLO_SKILL);
    let out = spoke.run(&["exec", "-e", "device.GreeterSkill.hello(42)"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("hello(name: string) -> string"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn confirmation_without_a_terminal_is_refused_and_no_model_is_refused() {
    let spoke = Spoke::new().with_skill("greeter.rhai", HELLO_SKILL);
    let out = spoke.run(&["exec", "-e", "device.GreeterSkill.forget()"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("the user said no to GreeterSkill.forget()"),
        "{}",
        stderr(&out)
    );

    let out = spoke.run(&["exec", "-e", "device.GreeterSkill.reset()"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot be called from scripts"),
        "{}",
        stderr(&out)
    );

    // A person calling it directly is not model code.
    let out = spoke.run(&["skills", "call", "GreeterSkill.reset"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "\"reset\"");
}

#[test]
fn explicit_device_is_this_one_or_a_clear_error() {
    let spoke = Spoke::new().with_skill("greeter.rhai", HELLO_SKILL);
    let out = spoke.run(&[
        "exec",
        "-e",
        r#"devices["test-box"].GreeterSkill.hello("me")"#,
    ]);
    assert_eq!(stdout(&out), "Hello, me!\n", "{}", stderr(&out));
    let out = spoke.run(&["exec", "-e", r#"devices["attic"].GreeterSkill.hello("me")"#]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("attic"), "{}", stderr(&out));
}

#[test]
fn search_from_model_code_hides_no_model_functions() {
    let spoke = Spoke::new().with_skill("greeter.rhai", HELLO_SKILL);
    let out = spoke.run(&[
        "exec",
        "-e",
        "let r = device.search_skills(\"\"); r.map(|s| s.name)",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let names = stdout(&out);
    assert!(
        names.contains("GreeterSkill.hello") && !names.contains("reset"),
        "{names}"
    );
}

#[test]
fn skills_call_positional_named_and_errors() {
    let spoke = Spoke::new().with_skill("greeter.rhai", HELLO_SKILL);
    let out = spoke.run(&["skills", "call", "GreeterSkill.hello", r#"["Ann"]"#]);
    assert_eq!(stdout(&out).trim(), "\"Hello, Ann!\"", "{}", stderr(&out));
    let out = spoke.run(&["skills", "call", "hello", r#"{"name": "Bo"}"#]);
    assert_eq!(stdout(&out).trim(), "\"Hello, Bo!\"", "{}", stderr(&out));
    let out = spoke.run(&["skills", "call", "GreeterSkill.helo"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("hello"),
        "a suggestion: {}",
        stderr(&out)
    );
}

#[test]
fn skills_info_shows_docstrings() {
    let spoke = Spoke::new().with_skill("greeter.rhai", HELLO_SKILL);
    let out = spoke.run(&["skills", "info", "GreeterSkill"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("Greets people by name.") && text.contains("Say hello to someone."),
        "{text}"
    );
    let out = spoke.run(&["skills", "info", "GreeterSkill.forget"]);
    assert!(stdout(&out).contains("confirmation"), "{}", stdout(&out));
}

#[test]
fn skills_check_reports_broken_files_and_keeps_good_ones() {
    let spoke = Spoke::new()
        .with_skill("greeter.rhai", HELLO_SKILL)
        .with_skill(
            "broken.rhai",
            "//! Broken.\n\n/// Oops.\nfn oops() {\n    let x = ;\n}\n",
        );
    let dir = spoke.skills.path().to_str().unwrap().to_string();
    let out = spoke.run(&["skills", "check", &dir]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("broken.rhai:5:"), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("hello(name: string) -> string"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("1 skill classes"), "{}", stdout(&out));
}

/// A parameter without its `@param` line loads as `any`: `skills check` succeeds and
/// warns where it is and how to document it; a function with no doc comment is still
/// an error.
#[test]
fn skills_check_warns_about_a_parameter_without_param() {
    let spoke = Spoke::new().with_skill(
        "t.rhai",
        "//! S.\n\n/// Run.\n/// @param b: int  B.\nfn run(a, b) {}\n",
    );
    let dir = spoke.skills.path().to_str().unwrap().to_string();
    let out = spoke.run(&["skills", "check", &dir]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("TSkill.run(a: any, b: int) -> ()"),
        "{}",
        stdout(&out)
    );
    let warning = stderr(&out)
        .lines()
        .find(|l| l.starts_with("warning: "))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("{}", stderr(&out)));
    assert!(
        warning.ends_with(
            "t.rhai:5:8: parameter `a` of `run` has no `@param` line, so it takes any value and \
             the model is told nothing about it; add `/// @param a: <type>  <description>`"
        ),
        "{warning}"
    );

    let spoke = Spoke::new().with_skill("t.rhai", "//! S.\n\nfn run(a) {}\n");
    let dir = spoke.skills.path().to_str().unwrap().to_string();
    let out = spoke.run(&["skills", "check", &dir]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("t.rhai:3:"), "{}", stderr(&out));
}

#[test]
fn bundled_skills_check_clean() {
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
    let spoke = Spoke::new();
    let out = spoke.run(&["skills", "check", bundled.to_str().unwrap()]);
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}

#[test]
fn config_show_and_errors() {
    let spoke = Spoke::new();
    let out = spoke.run(&["config", "show"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("name = \"Test Box\""),
        "{}",
        stdout(&out)
    );

    let bad = spoke.data.path().join("bad.toml");
    std::fs::write(&bad, "[sandbox]\nmemory = 3\n").unwrap();
    let out = spoke.run(&["--config", bad.to_str().unwrap(), "config", "show"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("sandbox.memory"), "{}", stderr(&out));
    assert!(stderr(&out).contains("bad.toml"), "{}", stderr(&out));
}

/// The run's total time in `exec_total_time_bounds_a_loop_of_skill_calls`.
const TOTAL_TIMEOUT: Duration = Duration::from_secs(2);
/// What issue 14 allows past the total time, plus the binary's start-up.
const TOTAL_SLACK: Duration = Duration::from_millis(500);

/// Kills the child when a test ends early, so a hanging run does not outlive it.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn exec_total_time_bounds_a_loop_of_skill_calls() {
    let system =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("skills/system.rhai"))
            .unwrap();
    let spoke = Spoke::new().with_skill("system.rhai", &system);
    // Each call runs `df` and takes milliseconds, none of it charged to the script's
    // own 5 s; only the total ends the loop.
    let child = spoke
        .command(&["exec", "-e", r#"loop { device.SystemSkill.disk("/") }"#])
        .env(
            "STRAWBERRY_SPOKE__SANDBOX__TOTAL_TIMEOUT_MS",
            TOTAL_TIMEOUT.as_millis().to_string(),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Reaped(child);
    let status = poll::wait_for(
        "exec to end at its total time",
        TOTAL_TIMEOUT + TOTAL_SLACK,
        || child.0.try_wait().unwrap(),
    );
    let mut err = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("sandbox.total_timeout_ms"), "{err}");
}

const KETTLE: &str = r#"//! The kitchen kettle.

/// Switch the kettle on.
///
/// @return string  What happened.
fn switch_on() {
    "on"
}

/// How full the kettle is.

fn water_level() {
    50
}

/// Switch the kettle off.
/// @request turn the kettle off
fn switch_off() {
    "off"
}
"#;

/// `skills suggest` asks the hub for `@request` lines for the functions without
/// them, prints them, and with `--write` puts them into the file, which still loads;
/// a second run has nothing to ask; an answer without JSON is an error that changes
/// nothing.
#[test]
fn suggest_asks_the_hub_for_request_lines_and_writes_them() {
    let answer = r#"Here you go:
```json
{"switch_on": ["I fancy a cuppa", "boil some water", "boil some water", "put the kettle on\nplease"],
 "water_level": ["is there enough water in the kettle"],
 "switch_off": ["not asked for"], "make_tea": ["not a function"]}
```"#;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let hub = rt.block_on(llm::ScriptedServer::start(vec![
        llm::Reply::Chunks(llm::text_reply(&[answer])),
        llm::Reply::Chunks(llm::text_reply(&[answer])),
        llm::Reply::Chunks(llm::text_reply(&["Sorry, I can't help with that."])),
    ]));
    let spoke = Spoke::new().with_skill("kettle.rhai", KETTLE);
    let config = spoke.data.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[hub]\nendpoints = [{{ url = \"{}\", model = \"test\" }}]\n",
            hub.url
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let file = spoke.skills.path().join("kettle.rhai");

    let out = spoke.run(&["--config", config, "skills", "suggest"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = format!(
        "{0}:6: KettleSkill.switch_on\n/// @request I fancy a cuppa\n/// @request boil some water\n/// @request put the kettle on please\n{0}:12: KettleSkill.water_level\n/// @request is there enough water in the kettle\n",
        file.display()
    );
    assert_eq!(stdout, shown);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        KETTLE,
        "printing changes nothing"
    );
    // The hub was asked about the two functions without lines, with their docs.
    let requests = hub.requests();
    assert_eq!(requests.len(), 1);
    let question = requests[0]["messages"][1]["content"].as_str().unwrap();
    assert!(
        question.starts_with("Skill KettleSkill: The kitchen kettle.\n"),
        "{question}"
    );
    assert!(
        question.contains("- switch_on() -> string: Switch the kettle on."),
        "{question}"
    );
    assert!(
        question.contains("- water_level() -> (): How full the kettle is."),
        "{question}"
    );
    assert!(!question.contains("switch_off"), "{question}");

    let out = spoke.run(&["--config", config, "skills", "suggest", "--write"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = std::fs::read_to_string(&file).unwrap();
    // At the end of each doc comment; the blank line before `fn water_level` stays.
    assert!(
        written.contains("/// @return string  What happened.\n/// @request I fancy a cuppa\n/// @request boil some water\n/// @request put the kettle on please\nfn switch_on() {"),
        "{written}"
    );
    assert!(
        written.contains("/// How full the kettle is.\n/// @request is there enough water in the kettle\n\nfn water_level() {"),
        "{written}"
    );
    let check = spoke.run(&["skills", "check"]);
    let listed = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{listed}");
    assert!(
        listed.contains("    asked as: I fancy a cuppa\n"),
        "{listed}"
    );

    // Nothing left to ask: the hub is not called again.
    let out = spoke.run(&["--config", config, "skills", "suggest"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to ask"));
    assert_eq!(hub.requests().len(), 2);

    // An answer that is not JSON: exit 2, the file as it was.
    let spoke = Spoke::new().with_skill("kettle.rhai", KETTLE);
    let out = spoke.run(&["--config", config, "skills", "suggest", "--write"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("did not answer with a JSON object"), "{err}");
    assert_eq!(
        std::fs::read_to_string(spoke.skills.path().join("kettle.rhai")).unwrap(),
        KETTLE
    );
}

/// An answer far longer than asked for is not read to its end (the hub client's
/// `hub.max_reply_bytes`, as for a turn): exit 2, file unchanged.
#[test]
fn suggest_stops_reading_an_answer_past_its_bound() {
    let flood = "x".repeat(1024);
    let pieces: Vec<&str> = std::iter::repeat_n(flood.as_str(), 64).collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let hub = rt.block_on(llm::ScriptedServer::start(vec![llm::Reply::Chunks(
        llm::text_reply(&pieces),
    )]));
    let spoke = Spoke::new().with_skill("kettle.rhai", KETTLE);
    let config = spoke.data.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[hub]\nendpoints = [{{ url = \"{}\", model = \"test\" }}]\n",
            hub.url
        ),
    )
    .unwrap();
    let out = spoke.run(&[
        "--config",
        config.to_str().unwrap(),
        "skills",
        "suggest",
        "--write",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("hub.max_reply_bytes"), "{err}");
    assert_eq!(
        std::fs::read_to_string(spoke.skills.path().join("kettle.rhai")).unwrap(),
        KETTLE
    );
}

/// Someone who built with cargo fetches a speech model with one command: no
/// `strawberry-spoke` on PATH, the model is checked, converted and lands beside
/// `stt.model`, the command says which line to set, and the file transcribes.
#[test]
fn model_fetch_works_from_a_build_and_lands_where_the_config_looks() {
    let _cores = cpu::heavy_blocking();
    let spoke = Spoke::new();
    let models = tempfile::tempdir().unwrap();
    let configured = models.path().join("ggml-base-q8_0.bin");
    let out = spoke
        .command(&["model", "fetch", "tiny.en"])
        .env("STRAWBERRY_SPOKE__STT__MODEL", &configured)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let fetched = models.path().join("ggml-tiny.en-q8_0.bin");
    assert!(fetched.is_file(), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!("stt.model = {:?}", fetched.display().to_string())),
        "{}",
        stdout(&out)
    );

    let clip = &stt::clips()[0];
    let heard = spoke
        .command(&["transcribe", clip.wav.to_str().unwrap()])
        .env("STRAWBERRY_SPOKE__STT__MODEL", &fetched)
        .output()
        .unwrap();
    assert!(heard.status.success(), "{}", stderr(&heard));
    let wer = stt::word_error_rate([(clip.text.as_str(), stdout(&heard).trim())]);
    assert!(wer < 0.3, "{:?} heard as {:?}", clip.text, stdout(&heard));

    let unknown = spoke.run(&["model", "fetch", "large"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", stderr(&unknown));
}
