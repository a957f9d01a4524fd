//! The conversation loop against a scripted OpenAI-compatible server on loopback:
//! real HTTP, real SSE framing, real sandbox runs against real skill files. Each test
//! checks the exact ordered output and what was sent back to the model.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use strawberry_spoke::agent::{Agent, Session, TurnError, TurnEvent};
use strawberry_spoke::app::Parts;
use strawberry_spoke::config::{Config, EndpointConfig};
use strawberry_spoke::hub::CodeMode;
use strawberry_spoke::hub::HubClient;
use strawberry_spoke::sandbox::Sandbox;
use strawberry_spoke::skills::Registry;
use strawberry_spoke::skills::watch::LiveRegistry;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::support::llm::{
    Reply, ScriptedServer, delta_event, refusing_url, text_reply, text_reply_in_pieces,
};
use crate::support::{llm, poll};

struct Setup {
    agent: Agent,
    session: Session,
    _data: tempfile::TempDir,
}

fn config(urls: &[&str], data: &Path) -> Config {
    let mut config = Config::default();
    config.device.name = "kitchen".into();
    config.device.data_dir = data.to_path_buf();
    config.skills.dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/skills_good");
    config.hub.endpoints = urls
        .iter()
        .map(|url| EndpointConfig {
            url: url.to_string(),
            model: "scripted".into(),
            api_key_file: None,
            api_key_env: None,
        })
        .collect();
    config.hub.connect_timeout_ms = 1_000;
    config.hub.first_byte_timeout_ms = 2_000;
    config.hub.chunk_timeout_ms = 500;
    config
}

fn setup_with(urls: &[&str], tweak: impl FnOnce(&mut Config)) -> Setup {
    let data = tempfile::tempdir().unwrap();
    let mut config = config(urls, data.path());
    tweak(&mut config);
    let parts = Parts::new(&config).unwrap();
    let (registry, errors) = parts.skills_in(&config.skills.dir);
    assert!(errors.is_empty(), "{errors:?}");
    let skills = Arc::new(LiveRegistry::new(Arc::new(registry)));
    let agent = parts.agent(skills, None, CancellationToken::new()).unwrap();
    let session = agent.session();
    Setup {
        agent,
        session,
        _data: data,
    }
}

fn setup(urls: &[&str]) -> Setup {
    setup_with(urls, |_| {})
}

/// Runs one turn, answering confirmations with `answer`; returns the events as text.
async fn turn_answering(
    setup: &mut Setup,
    text: &str,
    answer: bool,
) -> (Vec<String>, Result<(), TurnError>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let collector = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(event) = rx.recv().await {
            seen.push(match event {
                TurnEvent::Sentence(s) => format!("say: {s}"),
                TurnEvent::Code(c) => format!("code: {c}"),
                TurnEvent::CodeResult { output, result } => match result {
                    Ok(v) => format!("result: {output:?} = {v}"),
                    Err(e) => format!("result: {output:?} ! {e}"),
                },
                TurnEvent::Confirm { call, reply, .. } => {
                    reply.send(answer).unwrap();
                    format!("confirm: {call}")
                }
                TurnEvent::Notice(n) => format!("notice: {n}"),
                TurnEvent::Error(e) => format!("error: {e}"),
            });
        }
        seen
    });
    let result = setup.agent.turn(&mut setup.session, text, &tx).await;
    drop(tx);
    (collector.await.unwrap(), result)
}

async fn turn(setup: &mut Setup, text: &str) -> (Vec<String>, Result<(), TurnError>) {
    turn_answering(setup, text, false).await
}

/// The messages of a recorded request.
fn messages(request: &Value) -> Vec<Value> {
    request["messages"].as_array().unwrap().clone()
}

fn last_text(request: &Value) -> String {
    messages(request).last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string()
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn code_blocks_with_text_between_run_in_model_order() {
    let first = "Let me look.\n```rhai\nprint(device.ClimateSkill.temperature(\"kitchen\"));\n```\nAnd the humidity:\n```rhai\ndevice.ClimateSkill.humidity()\n```\n";
    let server = ScriptedServer::start(vec![
        Reply::Chunks(text_reply_in_pieces(first, 7)),
        Reply::Chunks(text_reply(&["It is 21.5 degrees ", "and 40% humid. Nice!"])),
    ])
    .await;
    let mut s = setup(&[&server.url]);
    let (events, result) = turn(&mut s, "How is the climate in the kitchen?").await;
    result.unwrap();
    assert_eq!(
        events,
        strs(&[
            "say: Let me look.",
            "code: print(device.ClimateSkill.temperature(\"kitchen\"));",
            "result: \"21.5\\n\" = ",
            "say: And the humidity:",
            "code: device.ClimateSkill.humidity()",
            "result: \"\" = 40",
            "say: It is 21.5 degrees and 40% humid.",
            "say: Nice!",
        ])
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["stream"], json!(true));
    assert_eq!(requests[0]["model"], json!("scripted"));
    let system = messages(&requests[0])[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.contains("\"kitchen\""), "{system}");
    assert!(
        system.contains("temperature(room: string = \"living room\") -> float"),
        "{system}"
    );
    assert!(system.contains("```rhai"), "{system}");
    let second = messages(&requests[1]);
    assert_eq!(
        second[1],
        json!({"role": "user", "content": "How is the climate in the kitchen?"})
    );
    assert_eq!(second[2]["role"], json!("assistant"));
    assert_eq!(second[2]["content"], json!(first));
    assert_eq!(
        last_text(&requests[1]),
        "Result of code block 1:\nprinted:\n21.5\n\nResult of code block 2:\nvalue: 40\n\nNow answer the user briefly, or fix the code if it failed."
    );
}

#[tokio::test]
async fn fences_split_across_chunks() {
    let chunks = [
        "Sure.\n`",
        "``rh",
        "ai\nprint(\"hi\")\n`",
        "`",
        "`\nDone",
        ".",
    ];
    let server = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&chunks)),
        Reply::Chunks(text_reply(&["It printed hi."])),
    ])
    .await;
    let mut s = setup(&[&server.url]);
    let (events, result) = turn(&mut s, "say hi").await;
    result.unwrap();
    assert_eq!(
        events,
        strs(&[
            "say: Sure.",
            "code: print(\"hi\")",
            "result: \"hi\\n\" = ",
            "say: Done.",
            "say: It printed hi.",
        ])
    );
}

#[tokio::test]
async fn code_runs_as_soon_as_its_fence_closes() {
    // The reply stalls right after the block: its result must already be out.
    let mut chunks = vec![delta_event(json!({"role": "assistant"}))];
    for piece in [
        "On it.\n```rhai\n",
        "device.TimerSkill.remaining()\n```\n",
        "The tim",
    ] {
        chunks.push(delta_event(json!({"content": piece})));
    }
    let server = ScriptedServer::start(vec![Reply::StallAfter(chunks)]).await;
    let mut s = setup(&[&server.url]);
    let (events, result) = turn(&mut s, "timer?").await;
    assert!(matches!(result, Err(TurnError::Hub(_))), "{result:?}");
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(
        events[..3],
        strs(&[
            "say: On it.",
            "code: device.TimerSkill.remaining()",
            "result: \"\" = 42"
        ])
    );
    assert!(
        events[3].starts_with("error: the model stopped sending for 500ms"),
        "{events:?}"
    );
}

#[tokio::test]
async fn code_errors_go_back_and_the_model_recovers() {
    let server = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&["```rhai\nlet x = 1;\nx.nope()\n```"])),
        Reply::Chunks(text_reply(&["```rhai\nprint(1 + 1)\n```"])),
        Reply::Chunks(text_reply(&["Two."])),
    ])
    .await;
    let mut s = setup(&[&server.url]);
    let (events, result) = turn(&mut s, "1+1?").await;
    result.unwrap();
    assert_eq!(events.len(), 5, "{events:?}");
    assert!(
        events[1].contains("! runtime error at line 2, column 3"),
        "{events:?}"
    );
    assert_eq!(events[3..], strs(&["result: \"2\\n\" = ", "say: Two."]));
    let requests = server.requests();
    let feedback = last_text(&requests[1]);
    assert!(
        feedback.starts_with("Result of code block 1:\nerror: runtime error at line 2, column 3"),
        "{feedback}"
    );
}

#[tokio::test]
async fn the_same_failing_code_twice_ends_the_turn() {
    let bad = "```rhai\ndevice.NoSuchSkill.go()\n```";
    let server = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&[bad])),
        Reply::Chunks(text_reply(&[bad])),
        Reply::Chunks(text_reply(&["Never sent."])),
    ])
    .await;
    let mut s = setup(&[&server.url]);
    let (events, result) = turn(&mut s, "go").await;
    assert!(
        matches!(result, Err(TurnError::RepeatedFailure(_))),
        "{result:?}"
    );
    assert_eq!(events.len(), 5, "{events:?}");
    assert!(
        events[4].starts_with("error: the model repeated code that had just failed"),
        "{events:?}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn round_limit_ends_a_model_that_only_writes_code() {
    let code = |n: i32| Reply::Chunks(text_reply(&[&format!("```rhai\nprint({n})\n```")]));
    let server = ScriptedServer::start(vec![code(1), code(2), code(3), code(4)]).await;
    let mut s = setup_with(&[&server.url], |c| c.agent.max_rounds = 3);
    let (events, result) = turn(&mut s, "count").await;
    assert!(
        matches!(result, Err(TurnError::RoundLimit(3))),
        "{result:?}"
    );
    assert_eq!(
        events,
        strs(&[
            "code: print(1)",
            "result: \"1\\n\" = ",
            "code: print(2)",
            "result: \"2\\n\" = ",
            "code: print(3)",
            "result: \"3\\n\" = ",
            "error: stopped after 3 rounds of code without a final answer (agent.max_rounds); try asking more simply",
        ])
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn native_tool_calls_run_like_fenced_code() {
    let server = ScriptedServer::start(vec![
        Reply::Chunks(llm::tool_call_reply(
            "call_7",
            "print(device.ClimateSkill.humidity())",
            4,
        )),
        Reply::Chunks(text_reply(&["Forty percent."])),
    ])
    .await;
    let mut s = setup_with(&[&server.url], |c| c.hub.mode = CodeMode::Tools);
    let (events, result) = turn(&mut s, "humidity?").await;
    result.unwrap();
    assert_eq!(
        events,
        strs(&[
            "code: print(device.ClimateSkill.humidity())",
            "result: \"40\\n\" = ",
            "say: Forty percent.",
        ])
    );
    let requests = server.requests();
    assert_eq!(
        requests[0]["tools"][0]["function"]["name"],
        json!("run_code")
    );
    let second = messages(&requests[1]);
    assert_eq!(second[2]["role"], json!("assistant"));
    assert_eq!(second[2]["tool_calls"][0]["id"], json!("call_7"));
    assert_eq!(
        second[2]["tool_calls"][0]["function"]["arguments"],
        json!(json!({"code": "print(device.ClimateSkill.humidity())"}).to_string())
    );
    assert_eq!(
        second[3],
        json!({"role": "tool", "tool_call_id": "call_7", "content": "printed:\n40"})
    );
}

#[tokio::test]
async fn confirmation_yes_runs_and_no_is_an_error_the_script_sees() {
    let code = "```rhai\nprint(device.TimerSkill.start(300, \"tea\"))\n```";
    let server = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&[code])),
        Reply::Chunks(text_reply(&["Timer set."])),
        Reply::Chunks(text_reply(&[code])),
        Reply::Chunks(text_reply(&["You said no."])),
    ])
    .await;
    let mut s = setup(&[&server.url]);
    let (events, result) = turn_answering(&mut s, "tea timer", true).await;
    result.unwrap();
    assert_eq!(
        events,
        strs(&[
            "code: print(device.TimerSkill.start(300, \"tea\"))",
            "confirm: TimerSkill.start(300, \"tea\")",
            "result: \"tea: 300 s\\n\" = ",
            "say: Timer set.",
        ])
    );
    let (events, result) = turn_answering(&mut s, "tea timer", false).await;
    result.unwrap();
    assert_eq!(events[1], "confirm: TimerSkill.start(300, \"tea\")");
    assert!(
        events[2].contains("the user said no to TimerSkill.start(300, \"tea\")"),
        "{events:?}"
    );
    let told = last_text(&server.requests()[3]);
    assert!(told.contains("error: runtime error"), "{told}");
    assert!(
        told.starts_with("Result of code block 1:\nthe user said no to TimerSkill.start"),
        "{told}"
    );
    let told = last_text(&server.requests()[1]);
    assert!(
        told.starts_with(
            "Result of code block 1:\nthe user allowed TimerSkill.start(300, \"tea\")"
        ),
        "{told}"
    );
}

#[tokio::test]
async fn functions_never_callable_from_model_code_are_refused() {
    let server = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&["```rhai\ndevice.TimerSkill.clear_all()\n```"])),
        Reply::Chunks(text_reply(&["I cannot do that."])),
    ])
    .await;
    let mut s = setup(&[&server.url]);
    let (events, result) = turn(&mut s, "clear all timers").await;
    result.unwrap();
    assert!(
        events[1].contains("cannot be called from scripts"),
        "{events:?}"
    );
    assert!(!events.iter().any(|e| e.starts_with("confirm")));
}

/// A failure of some kind, then the next turn in the same session works.
async fn fails_then_recovers(first: Reply, tweak: impl FnOnce(&mut Config)) -> Vec<String> {
    let server =
        ScriptedServer::start(vec![first, Reply::Chunks(text_reply(&["Back again."]))]).await;
    let mut s = setup_with(&[&server.url], tweak);
    let (events, result) = turn(&mut s, "hello").await;
    assert!(result.is_err(), "{events:?}");
    assert!(events.last().unwrap().starts_with("error: "), "{events:?}");
    let (next, result) = turn(&mut s, "again").await;
    result.unwrap();
    assert_eq!(next, strs(&["say: Back again."]));
    events
}

#[tokio::test]
async fn refused_connection_says_what_to_check() {
    let mut s = setup(&[&refusing_url().await]);
    let (events, result) = turn(&mut s, "hello").await;
    assert!(matches!(result, Err(TurnError::Hub(_))));
    assert_eq!(events.len(), 1);
    assert!(
        events[0].starts_with("error: no model endpoint answered: http://127.0.0.1:"),
        "{events:?}"
    );
    assert!(events[0].contains("cannot connect"), "{events:?}");
    assert!(
        events[0].contains("is the server running and the URL right?"),
        "{events:?}"
    );
}

#[tokio::test]
async fn fallback_answers_and_a_dead_endpoint_is_not_retried_every_turn() {
    let main = ScriptedServer::start(vec![Reply::Status(
        503,
        "{\"error\":\"loading model\"}".into(),
    )])
    .await;
    let fallback = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&["Small model here."])),
        Reply::Chunks(text_reply(&["Still me."])),
    ])
    .await;
    let mut s = setup(&[&main.url, &fallback.url]);
    let (events, result) = turn(&mut s, "hello").await;
    result.unwrap();
    assert_eq!(events.len(), 2);
    assert!(
        events[0]
            .starts_with("notice: the main model did not answer; a fallback (http://127.0.0.1:"),
        "{events:?}"
    );
    assert_eq!(events[1], "say: Small model here.");
    let (events, result) = turn(&mut s, "again").await;
    result.unwrap();
    assert_eq!(events[1], "say: Still me.");
    assert_eq!(
        main.requests().len(),
        1,
        "the dead endpoint was retried at once"
    );
    assert_eq!(fallback.requests().len(), 2);
}

#[tokio::test]
async fn stall_before_the_first_byte() {
    let events = fails_then_recovers(Reply::StallBeforeHeaders, |c| {
        c.hub.first_byte_timeout_ms = 300
    })
    .await;
    assert_eq!(events.len(), 1);
    assert!(
        events[0].contains("no answer within 300 ms; is the model loaded?"),
        "{events:?}"
    );
}

#[tokio::test]
async fn stall_in_the_middle_of_the_reply() {
    let mut chunks = vec![delta_event(json!({"role": "assistant"}))];
    chunks.push(delta_event(json!({"content": "Hello there. How ar"})));
    let events = fails_then_recovers(Reply::StallAfter(chunks), |_| {}).await;
    assert_eq!(events[0], "say: Hello there.");
    assert!(
        events[1].contains("stopped sending for 500ms"),
        "{events:?}"
    );
    assert_eq!(events.len(), 2);
}

#[tokio::test]
async fn client_error_names_the_cause() {
    let body = json!({"error": {"message": "invalid api key", "type": "auth"}}).to_string();
    let events = fails_then_recovers(Reply::Status(401, body), |_| {}).await;
    assert_eq!(events.len(), 1);
    assert!(
        events[0].contains("HTTP 401 Unauthorized: invalid api key (check the API key"),
        "{events:?}"
    );
}

#[tokio::test]
async fn server_error_names_the_cause() {
    let events = fails_then_recovers(Reply::Status(500, "out of memory".into()), |_| {}).await;
    assert!(
        events[0].contains(
            "HTTP 500 Internal Server Error: out of memory (the server failed; check its log)"
        ),
        "{events:?}"
    );
}

#[tokio::test]
async fn stream_cut_in_the_middle_of_a_sentence() {
    let mut chunks = vec![delta_event(json!({"role": "assistant"}))];
    chunks.push(delta_event(
        json!({"content": "The weather is nice. It will"}),
    ));
    let events = fails_then_recovers(Reply::CutAfter(chunks), |_| {}).await;
    assert_eq!(events[0], "say: The weather is nice.");
    assert!(
        events[1].starts_with("error: the reply was cut off"),
        "{events:?}"
    );
    assert!(
        events[1].ends_with("check the hub and the network"),
        "{events:?}"
    );
    assert_eq!(events.len(), 2);
}

#[tokio::test]
async fn malformed_json_in_the_stream() {
    let chunks = vec![
        delta_event(json!({"content": "Fine. "})),
        "data: {\"choices\": [\n\n".to_string(),
    ];
    let events = fails_then_recovers(Reply::Chunks(chunks), |_| {}).await;
    assert_eq!(events[0], "say: Fine.");
    assert!(
        events[1].starts_with("error: the hub sent malformed data (invalid JSON in the stream"),
        "{events:?}"
    );
}

#[tokio::test]
async fn error_object_in_the_middle_of_the_stream() {
    let chunks = vec![
        delta_event(json!({"content": "Hi. "})),
        format!(
            "data: {}\n\n",
            json!({"error": {"message": "model crashed"}})
        ),
    ];
    let events = fails_then_recovers(Reply::Chunks(chunks), |_| {}).await;
    assert_eq!(
        events,
        strs(&[
            "say: Hi.",
            "error: the hub reported an error: model crashed"
        ])
    );
}

/// llama.cpp wraps every token in a few hundred bytes of JSON (ids, timings): a short
/// answer carried in heavy framing is not an "endless reply", and `max_tokens` goes out
/// with the request.
#[tokio::test]
async fn heavy_framing_is_not_an_endless_reply() {
    let timings = "x".repeat(600);
    let mut chunks = vec![delta_event(json!({"role": "assistant"}))];
    for _ in 0..400 {
        chunks.push(format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"content": "a"}}], "timings": {"pad": timings}})
        ));
    }
    chunks.push(delta_event(json!({"content": "."})));
    chunks.push("data: [DONE]\n\n".into());
    let server = ScriptedServer::start(vec![Reply::Chunks(vec![chunks.concat()])]).await;
    let mut s = setup_with(&[&server.url], |c| {
        c.hub.max_reply_bytes = 2_000;
        c.hub.max_tokens = 77;
    });
    let (events, result) = turn(&mut s, "x").await;
    result.unwrap();
    assert_eq!(events, vec![format!("say: {}.", "a".repeat(400))]);
    assert_eq!(server.requests()[0]["max_tokens"], 77);
}

#[tokio::test]
async fn endless_reply_is_stopped() {
    let events = fails_then_recovers(
        Reply::Forever(delta_event(json!({"content": "la la "}))),
        |c| c.hub.max_reply_bytes = 2_000,
    )
    .await;
    assert_eq!(
        events,
        strs(&[
            "error: the model's reply passed 2000 bytes without ending and was stopped (hub.max_reply_bytes)"
        ])
    );
}

#[tokio::test]
async fn a_code_block_that_never_closes_is_not_run_and_the_model_is_told() {
    let server = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&["Here.\n```rhai\nprint(1)\n"])),
        Reply::Chunks(text_reply(&["Sorry, done."])),
    ])
    .await;
    let mut s = setup(&[&server.url]);
    let (events, result) = turn(&mut s, "x").await;
    result.unwrap();
    assert_eq!(
        events,
        strs(&[
            "say: Here.",
            "notice: the model's code block was never closed, so it did not run",
            "say: Sorry, done.",
        ])
    );
    assert!(last_text(&server.requests()[1]).starts_with("Your code block was not closed"));
}

#[tokio::test]
async fn empty_reply_and_plain_json_reply() {
    let server = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&[])),
        Reply::Json(json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Not streamed. Still fine."}, "finish_reason": "stop"}]})),
    ])
    .await;
    let mut s = setup(&[&server.url]);
    let (events, result) = turn(&mut s, "x").await;
    assert!(matches!(result, Err(TurnError::Empty)), "{events:?}");
    let (events, result) = turn(&mut s, "y").await;
    result.unwrap();
    assert_eq!(events, strs(&["say: Not streamed.", "say: Still fine."]));
}

#[tokio::test]
async fn memory_window_follow_ups_budget_and_clear() {
    let server = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&["Sunny in Paris."])),
        Reply::Chunks(text_reply(&["Rain tomorrow."])),
        Reply::Chunks(text_reply(&["Hello."])),
        Reply::Chunks(text_reply(&["Fresh start."])),
    ])
    .await;
    let mut s = setup_with(&[&server.url], |c| c.agent.memory_budget_tokens = 30);
    turn(&mut s, "What's the weather in Paris?")
        .await
        .1
        .unwrap();
    turn(&mut s, "And tomorrow?").await.1.unwrap();
    turn(&mut s, "Hi").await.1.unwrap();
    s.session.clear();
    turn(&mut s, "Who am I?").await.1.unwrap();
    let texts = |r: &Value| -> Vec<String> {
        messages(r)[1..]
            .iter()
            .map(|m| {
                format!(
                    "{}: {}",
                    m["role"].as_str().unwrap(),
                    m["content"].as_str().unwrap()
                )
            })
            .collect()
    };
    let requests = server.requests();
    assert_eq!(
        texts(&requests[1]),
        strs(&[
            "user: What's the weather in Paris?",
            "assistant: Sunny in Paris.",
            "user: And tomorrow?",
        ])
    );
    // 30 tokens hold one earlier turn, not two: the oldest went first.
    assert_eq!(
        texts(&requests[2]),
        strs(&[
            "user: And tomorrow?",
            "assistant: Rain tomorrow.",
            "user: Hi"
        ])
    );
    assert_eq!(texts(&requests[3]), strs(&["user: Who am I?"]));
}

#[tokio::test]
async fn large_catalogue_prompt_keeps_the_relevant_functions_within_budget() {
    let server = ScriptedServer::start(vec![]).await;
    let mut s = setup_with(&[&server.url], |c| {
        c.skills.dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
        c.agent.prompt_budget_tokens = 700;
    });
    let body = s.agent.preview(&mut s.session, "set the volume to 40");
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(system.len() / 4 <= 700, "{} tokens", system.len() / 4);
    assert!(system.contains("VolumeSkill"), "{system}");
    assert!(
        system.contains("more exist. Find them with device.search_skills"),
        "{system}"
    );
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "set the volume to 40"})
    );
}

/// Runs the real binary with the hub pointed at `url`; returns (status, stdout, stderr).
async fn spoke(args: &[&str], url: &str, stdin: &str) -> (Option<i32>, String, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let data = tempfile::tempdir().unwrap();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let url = url.to_string();
    let stdin = stdin.to_string();
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_strawberry-spoke"))
            .args(&args)
            .env(
                "STRAWBERRY_SPOKE__HUB__ENDPOINTS",
                format!("[{{url = \"{url}\", model = \"scripted\"}}]"),
            )
            .env(
                "STRAWBERRY_SPOKE__SKILLS__DIR",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/skills_good"),
            )
            .env("STRAWBERRY_SPOKE__DEVICE__DATA_DIR", data.path())
            .env("STRAWBERRY_SPOKE__DEVICE__NAME", "kitchen")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn ask_streams_to_stdout_and_exits_by_outcome() {
    let server = ScriptedServer::start(vec![
        Reply::Chunks(text_reply_in_pieces(
            "Checking.\n```rhai\nprint(device.ClimateSkill.humidity())\n```\n",
            5,
        )),
        Reply::Chunks(text_reply(&["It is 40 percent."])),
        Reply::Status(500, "boom".into()),
    ])
    .await;
    let (status, stdout, stderr) = spoke(&["ask", "how", "humid?"], &server.url, "").await;
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        "Checking.\n  | print(device.ClimateSkill.humidity())\n  > 40\nIt is 40 percent.\n"
    );
    assert_eq!(
        server.requests()[0]["messages"][1]["content"],
        json!("how humid?")
    );
    let (status, stdout, stderr) = spoke(&["ask", "again"], &server.url, "").await;
    assert_eq!(status, Some(2));
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("error: no model endpoint answered"),
        "{stderr}"
    );
    assert!(stderr.contains("HTTP 500"), "{stderr}");
}

#[tokio::test]
async fn chat_keeps_one_session_and_clear_forgets_it() {
    let server = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&["Sunny in Paris."])),
        Reply::Chunks(text_reply(&["Rain tomorrow."])),
        Reply::Chunks(text_reply(&["Hello again."])),
    ])
    .await;
    let (status, stdout, stderr) = spoke(
        &["chat"],
        &server.url,
        "Weather in Paris?\nAnd tomorrow?\n/clear\nHi\n",
    )
    .await;
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(stdout.matches("Rain tomorrow.").count(), 1, "{stdout}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(messages(&requests[1]).len(), 4);
    assert_eq!(messages(&requests[2]).len(), 2);
}

#[tokio::test]
async fn prompt_prints_the_exact_request() {
    let (status, stdout, stderr) =
        spoke(&["prompt", "set", "a", "timer"], "http://127.0.0.1:9", "").await;
    assert_eq!(status, Some(0), "{stderr}");
    let body: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(body["model"], json!("scripted"));
    assert_eq!(body["stream"], json!(true));
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "set a timer"})
    );
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("start(seconds: int, label: string = \"timer\") -> string  Start a countdown timer. [asks first]"), "{system}");
    assert!(
        !system.contains("clear_all"),
        "a @no_model function was offered: {system}"
    );
    assert!(
        system.contains("User: Set a timer for five minutes"),
        "{system}"
    );
}

/// How soon issue 14 wants a stopped turn's code to end.
const CANCEL_SLACK: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_turn_ends_its_code_and_the_skill_it_waits_on() {
    const NAP_SKILL: &str = "//! Naps, for tests.\n\n/// Sleep a while.\n///\n/// @param ms: int  How long, in milliseconds.\n/// @return int  The milliseconds slept.\nfn nap(ms) {\n    sleep_ms(ms);\n    ms\n}\n";
    let server = ScriptedServer::start(vec![
        Reply::Chunks(text_reply(&[
            "One moment.\n```rhai\ndevice.NapSkill.nap(5000)\n```\n",
        ])),
        Reply::Chunks(text_reply(&["Done."])),
    ])
    .await;
    let skills = tempfile::tempdir().unwrap();
    std::fs::write(skills.path().join("nap.rhai"), NAP_SKILL).unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut config = config(&[&server.url], data.path());
    config.skills.dir = skills.path().to_path_buf();
    let (registry, errors) = Registry::load(&config.skills.dir, &config.host_settings());
    assert!(errors.is_empty(), "{errors:?}");
    let sandbox = Arc::new(Sandbox::new(config.sandbox.settings()).unwrap());
    let hub = HubClient::new(&config.hub.settings()).unwrap();
    let agent = Arc::new(Agent::new(
        &config.agent_settings(),
        hub,
        sandbox.clone(),
        Arc::new(registry),
    ));

    let (tx, mut rx) = mpsc::unbounded_channel();
    let turn = tokio::spawn({
        let agent = agent.clone();
        async move {
            let mut session = agent.session();
            agent.turn(&mut session, "take a nap", &tx).await
        }
    });
    while !matches!(rx.recv().await, Some(TurnEvent::Code(_))) {}
    // A run holds a reference to the sandbox (besides this test's and the agent's)
    // for as long as it runs.
    poll::wait_for_async("the code to start", Duration::from_secs(5), || {
        (Arc::strong_count(&sandbox) == 3).then_some(())
    })
    .await;
    turn.abort();
    poll::wait_for_async(
        "the run to end after its turn was stopped",
        CANCEL_SLACK,
        || (Arc::strong_count(&sandbox) == 2).then_some(()),
    )
    .await;
    assert!(turn.await.unwrap_err().is_cancelled());
}
