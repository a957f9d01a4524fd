//! A hub that misbehaves on purpose (issue 14): huge tool-call indices, endless
//! tool-call arguments, endless error bodies, SSE events without end, odd chunking,
//! and an API key about to go over plain http. Real HTTP against the scripted server
//! on loopback, real agent turns; each failure ends the turn with a named limit and
//! the next turn works.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use strawberry_spoke::agent::{Agent, Session, TurnError, TurnEvent};
use strawberry_spoke::app::Parts;
use strawberry_spoke::config::{Config, EndpointConfig};
use strawberry_spoke::hub::CodeMode;
use strawberry_spoke::hub::HubClient;
use strawberry_spoke::skills::watch::LiveRegistry;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::support::cpu;
use crate::support::llm::{Reply, ScriptedServer, delta_event, text_reply};

/// How much a turn against a hostile hub may raise the process's peak RSS: generous
/// for a test binary, far below what a vector grown to a million tool calls takes.
const MAX_PEAK_GROWTH_KIB: u64 = 64 * 1024;

struct Setup {
    agent: Agent,
    session: Session,
    _data: tempfile::TempDir,
}

fn setup_with(url: &str, tweak: impl FnOnce(&mut Config)) -> Setup {
    let data = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.device.name = "kitchen".into();
    config.device.data_dir = data.path().to_path_buf();
    config.skills.dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/skills_good");
    config.hub.endpoints = vec![EndpointConfig {
        url: url.to_string(),
        model: "scripted".into(),
        api_key_file: None,
        api_key_env: None,
    }];
    config.hub.connect_timeout_ms = 1_000;
    config.hub.first_byte_timeout_ms = 2_000;
    config.hub.chunk_timeout_ms = 2_000;
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

async fn turn(setup: &mut Setup, text: &str) -> (Vec<String>, Result<(), TurnError>) {
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
                    let _ = reply.send(false);
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

/// A failing first turn, then a turn that works; returns the first turn's events.
async fn fails_then_recovers(first: Reply, tweak: impl FnOnce(&mut Config)) -> Vec<String> {
    let server =
        ScriptedServer::start(vec![first, Reply::Chunks(text_reply(&["Back again."]))]).await;
    let mut s = setup_with(&server.url, tweak);
    let (events, result) = turn(&mut s, "hello").await;
    assert!(matches!(result, Err(TurnError::Hub(_))), "{events:?}");
    assert!(events.last().unwrap().starts_with("error: "), "{events:?}");
    let (next, result) = turn(&mut s, "again").await;
    result.unwrap();
    assert_eq!(next, vec!["say: Back again.".to_string()]);
    events
}

/// Sets the process's peak resident set back to what it holds now (Linux 4.0 and
/// later), so the next reading of the peak is this test's, not an earlier test's in
/// this binary.
fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting the peak RSS");
}

/// The process's peak resident set since the last reset, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn a_huge_tool_call_index_ends_the_round_without_allocating_for_it() {
    // No Whisper or embedding model loading beside this, in this process, while it
    // measures the process's memory.
    let _cores = cpu::quiet().await;
    for (index, mode) in [
        (4_294_967_295u64, CodeMode::Tools),
        (1_000_000, CodeMode::Fenced),
        (u64::MAX, CodeMode::Tools),
        (16, CodeMode::Tools),
    ] {
        let chunks = vec![
            delta_event(json!({"role": "assistant", "content": null})),
            delta_event(
                json!({"tool_calls": [{"index": index, "id": "call_x", "type": "function",
                "function": {"name": "run_code", "arguments": "{\"code\":\"1\"}"}}]}),
            ),
            "data: [DONE]\n\n".to_string(),
        ];
        reset_peak_rss();
        let before = peak_rss_kib();
        let events = fails_then_recovers(Reply::Chunks(chunks), |c| c.hub.mode = mode).await;
        let growth = peak_rss_kib().saturating_sub(before);
        assert_eq!(
            events,
            vec![format!(
                "error: the model's reply has a tool call with index {index}, past the limit of 16 tool calls per reply (hub.max_tool_calls)"
            )]
        );
        assert!(
            growth < MAX_PEAK_GROWTH_KIB,
            "peak RSS grew by {growth} KiB for index {index}"
        );
    }
}

#[tokio::test]
async fn tool_call_arguments_count_against_max_reply_bytes() {
    let mut chunks = vec![delta_event(
        json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_1",
            "type": "function", "function": {"name": "run_code", "arguments": "{\"code\":\""}}]}),
    )];
    let piece = "1+".repeat(512);
    for _ in 0..64 {
        chunks.push(delta_event(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
        ));
    }
    chunks.push(delta_event(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": "1\"}"}}]}),
    ));
    chunks.push("data: [DONE]\n\n".into());
    let events = fails_then_recovers(Reply::Chunks(chunks), |c| {
        c.hub.mode = CodeMode::Tools;
        c.hub.max_reply_bytes = 2_000;
    })
    .await;
    assert_eq!(
        events,
        vec![
            "error: the model's reply passed 2000 bytes without ending and was stopped (hub.max_reply_bytes)"
                .to_string()
        ]
    );
}

#[tokio::test]
async fn an_endless_error_body_is_not_read_to_its_end() {
    let chunk = "out of memory; ".repeat(4096);
    let events = fails_then_recovers(Reply::StatusForever(500, chunk), |c| {
        c.hub.first_byte_timeout_ms = 10_000;
    })
    .await;
    assert_eq!(events.len(), 1, "{events:?}");
    let error = &events[0];
    assert!(
        error.contains("HTTP 500 Internal Server Error: out of memory; out of memory;"),
        "{error}"
    );
    assert!(
        error.ends_with("(the server failed; check its log)"),
        "{error}"
    );
    assert!(error.len() < 1_000, "{} bytes of error", error.len());
}

#[tokio::test]
async fn an_event_that_never_ends_is_stopped_at_max_event_bytes() {
    let events = fails_then_recovers(
        Reply::Forever(format!("data: {}", "x".repeat(8192))),
        |_| {},
    )
    .await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        events[0].contains(
            "an event of the stream passed 1048576 bytes without ending (hub.max_event_bytes)"
        ),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_reply_in_one_byte_chunks_is_the_same_reply() {
    let reply = text_reply(&["Hello there. ", "Two ", "sentences, ", "é and ✓."]);
    // Each character its own HTTP chunk: one byte each, but for the last two.
    let bytes: Vec<String> = reply.concat().chars().map(String::from).collect();
    let whole = ScriptedServer::start(vec![Reply::Chunks(reply)]).await;
    let split = ScriptedServer::start(vec![Reply::Chunks(bytes)]).await;
    let (expected, result) = turn(&mut setup_with(&whole.url, |_| {}), "hi").await;
    result.unwrap();
    let (events, result) = turn(&mut setup_with(&split.url, |_| {}), "hi").await;
    result.unwrap();
    assert_eq!(
        expected,
        vec![
            "say: Hello there.".to_string(),
            "say: Two sentences, é and ✓.".to_string()
        ]
    );
    assert_eq!(events, expected);
}

#[tokio::test]
async fn escape_sequences_in_the_reply_never_reach_a_terminal() {
    let reply = text_reply(&[
        "Hello\u{1b}[2J there.\u{7} ",
        "Left\u{202e}right\u{9b}31m text.",
    ]);
    let server = ScriptedServer::start(vec![Reply::Chunks(reply)]).await;
    let (events, result) = turn(&mut setup_with(&server.url, |_| {}), "hi").await;
    result.unwrap();
    assert_eq!(
        events,
        vec![
            "say: Hello[2J there.".to_string(),
            "say: Leftright31m text.".to_string()
        ]
    );
}

fn write_config(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

fn load(text: &str, env: &[(&str, &str)]) -> Result<Config, String> {
    let file = write_config(text);
    Config::load(
        Some(file.path()),
        env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
    )
    .map_err(|e| e.to_string())
}

#[test]
fn an_api_key_over_plain_http_to_another_host_is_refused_at_start() {
    let text = "[hub]\nendpoints = [{ url = \"http://192.0.2.7:8080/v1\", model = \"m\", api_key_env = \"PATH\" }]\n";
    let err = load(text, &[]).unwrap_err();
    assert!(err.contains("http://192.0.2.7:8080/v1"), "{err}");
    assert!(err.contains("use https://"), "{err}");
    assert!(err.contains("hub.allow_insecure = true"), "{err}");

    // A config built in code, past the loader, is refused by the client too.
    let mut config = Config::default();
    config.hub.endpoints[0].url = "http://hub.lan:8080".into();
    config.hub.endpoints[0].api_key_env = Some("PATH".into());
    let err = HubClient::new(&config.hub.settings())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("http://hub.lan:8080") && err.contains("hub.allow_insecure"),
        "{err}"
    );

    // Said on purpose: accepted.
    let config = load(text, &[("STRAWBERRY_SPOKE__HUB__ALLOW_INSECURE", "true")]).unwrap();
    HubClient::new(&config.hub.settings()).unwrap();
    // Loopback and https are fine without it.
    for url in [
        "http://localhost:8080",
        "http://127.0.0.1:8080",
        "http://[::1]:8080",
        "https://hub.lan",
    ] {
        let text = format!(
            "[hub]\nendpoints = [{{ url = \"{url}\", model = \"m\", api_key_env = \"PATH\" }}]\n"
        );
        let config = load(&text, &[]).unwrap();
        HubClient::new(&config.hub.settings()).unwrap();
    }
}
