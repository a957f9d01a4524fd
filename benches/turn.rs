//! The spoke's own time in a conversation turn, the model excluded: prompt building,
//! stream parsing, the sandbox run, feedback and memory, for catalogues of 20 and
//! 500 skill functions. The "model" is the scripted server from the tests answering
//! at once on loopback, so what is measured is everything the spoke does in a turn
//! of two rounds (a code block, then the answer). Prompt building is also measured
//! for a household: the 500 local functions plus five other online devices of 100
//! functions each, whose skills the prompt ranks and cuts together with the local ones.
//!
//! `cargo bench --bench turn` (`cargo bench --bench turn -- prompt/` for the prompts)

#[path = "../tests/support/mod.rs"]
#[allow(dead_code, reason = "a benchmark uses a few of the test helpers")]
mod support;

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use strawberry_spoke::agent::TurnEvent;
use strawberry_spoke::agent::prompt::{self, PromptContext};
use strawberry_spoke::app::Parts;
use strawberry_spoke::config::{Config, EndpointConfig};
use strawberry_spoke::hub::CodeMode;
use strawberry_spoke::mqtt::PeerLimits;
use strawberry_spoke::mqtt::peers::Peers;
use strawberry_spoke::mqtt::protocol::Registration;
use strawberry_spoke::skills::Registry;
use strawberry_spoke::skills::watch::LiveRegistry;
use tokio_util::sync::CancellationToken;

use support::llm;

const NOUNS: [&str; 10] = [
    "light", "music", "timer", "alarm", "door", "window", "heater", "fan", "blind", "garden",
];
const VERBS: [&str; 10] = [
    "read", "set", "toggle", "list", "start", "stop", "check", "reset", "dim", "open",
];

/// Writes `classes` skill files of `per_class` functions each into `dir`, the classes
/// named `{prefix}Zone{c}Skill`.
fn write_skills(dir: &Path, prefix: &str, classes: usize, per_class: usize) {
    for c in 0..classes {
        let noun = NOUNS[c % NOUNS.len()];
        let mut text = format!(
            "//! Controls the {noun}s of zone {c}.\n//!\n//! @class {prefix}Zone{c}Skill\n//! @example Check the {noun} in zone {c}\n//! print(device.{prefix}Zone{c}Skill.check_{noun}_0(1));\n\n"
        );
        for f in 0..per_class {
            let verb = VERBS[(f + c) % VERBS.len()];
            text.push_str(&format!(
                "/// {verb} the {noun} number {f} in zone {c}.\n///\n/// @param level: int  How strong, 0 to 100.\n/// @param label: string = \"main\"  Which one.\n/// @return int  The level doubled.\nfn {verb}_{noun}_{f}(level, label) {{\n    level * 2\n}}\n\n"
            ));
        }
        std::fs::write(dir.join(format!("zone{c}.rhai")), text).unwrap();
    }
}

fn bench_catalogue(c: &mut Criterion, classes: usize, per_class: usize) {
    let functions = classes * per_class;
    let skills = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    write_skills(skills.path(), "", classes, per_class);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // `set_music_0` exists in every catalogue (see `write_skills`); the bench checks
    // the call succeeded, so it never measures an error path.
    let code = "print(device.Zone1Skill.set_music_0(21))";
    let server = runtime.block_on(llm::ScriptedServer::cycling(vec![
        // Each reply is the same SSE events a model streams (six characters per
        // delta), written at once: the model's pace is not the spoke's time.
        llm::Reply::Chunks(vec![
            llm::text_reply_in_pieces(
                &format!("Let me check the music.\n```rhai\n{code}\n```\n"),
                6,
            )
            .concat(),
        ]),
        llm::Reply::Chunks(vec![
            llm::text_reply_in_pieces("The music level is 42. Anything else?", 6).concat(),
        ]),
    ]));

    let mut config = Config::default();
    config.device.name = "bench".into();
    config.device.data_dir = data.path().to_path_buf();
    config.skills.dir = skills.path().to_path_buf();
    config.hub.endpoints = vec![EndpointConfig {
        url: server.url.clone(),
        model: "scripted".into(),
        api_key_file: None,
        api_key_env: None,
    }];
    let parts = Parts::new(&config).unwrap();
    let (registry, errors) = parts.skills_in(&config.skills.dir);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        registry
            .classes()
            .iter()
            .map(|c| c.functions.len())
            .sum::<usize>(),
        functions
    );
    let registry = Arc::new(registry);
    let live = Arc::new(LiveRegistry::new(registry.clone()));
    let agent = parts.agent(live, None, CancellationToken::new()).unwrap();

    c.bench_function(&format!("turn/{functions}_functions"), |b| {
        b.iter(|| {
            runtime.block_on(async {
                let mut session = agent.session();
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                agent
                    .turn(&mut session, "what is the music level?", &tx)
                    .await
                    .unwrap();
                drop(tx);
                let mut sentences = 0;
                let mut printed = String::new();
                while let Some(event) = rx.recv().await {
                    match event {
                        TurnEvent::Sentence(_) => sentences += 1,
                        TurnEvent::CodeResult { output, result } => {
                            assert!(result.is_ok(), "{result:?}");
                            printed = output;
                        }
                        _ => {}
                    }
                }
                assert_eq!((sentences, printed.trim()), (3, "42"));
            })
        })
    });

    let time = prompt::local_time_now();
    let context = PromptContext {
        device_name: "bench",
        local_time: &time,
        mode: CodeMode::Fenced,
        budget_tokens: config.agent.prompt_budget_tokens,
        language: None,
    };
    c.bench_function(&format!("prompt/{functions}_functions"), |b| {
        b.iter(|| {
            black_box(prompt::system_prompt(
                &registry,
                None,
                &context,
                "what is the music level?",
            ))
        })
    });

    if functions == 500 {
        let peers = household(&config, 5, 10, 10);
        c.bench_function("prompt/500_functions_5_peers_x_100", |b| {
            b.iter(|| {
                black_box(prompt::system_prompt(
                    &registry,
                    Some(&peers),
                    &context,
                    "what is the music level?",
                ))
            })
        });
    }
}

/// `devices` other spokes online, each registering `classes` classes of `per_class`
/// functions of its own, taken in as the MQTT link takes registrations in.
fn household(config: &Config, devices: usize, classes: usize, per_class: usize) -> Peers {
    let mut peers = Peers::new(&config.device.name, PeerLimits::default());
    for d in 0..devices {
        let dir = tempfile::tempdir().unwrap();
        write_skills(dir.path(), &format!("Room{d}"), classes, per_class);
        let (registry, errors) = Registry::load(dir.path(), &config.host_settings());
        assert!(errors.is_empty(), "{errors:?}");
        let id = format!("room{d}");
        let registration =
            Registration::of(&registry, &id, &format!("Room {d}"), |f| f.model_callable);
        let payload = serde_json::to_vec(&registration).unwrap();
        peers.set_registration(&id, &payload).unwrap();
        peers.set_status(&id, b"online").unwrap();
    }
    peers
}

fn turns(c: &mut Criterion) {
    bench_catalogue(c, 4, 5);
    bench_catalogue(c, 50, 10);
}

criterion_group!(benches, turns);
criterion_main!(benches);
