//! The integration tests: one binary, each file of tests/ a module of it, sharing
//! `support`. Linked once instead of once per file, and the tests of every file share
//! the two test threads; `support::cpu` keeps the real-time voice tests away from the
//! CPU-heavy ones. tests/audio.rs is a binary of its own (it points the process's
//! `HOME` at fake sound cards).

mod support;

mod agent;
mod bundled_skills;
mod cli;
mod echo;
mod fuzz_replay;
mod hardening_store;
mod homeassistant;
mod host_api;
mod hub_bounds;
mod imports;
mod mcp;
mod mqtt;
mod mqtt_allow;
mod mqtt_hostile;
mod packaging;
mod real_server;
mod run_bounds;
mod sandbox;
mod skills_args;
mod skills_calls;
mod skills_embed;
mod skills_loading;
mod skills_search;
mod stt;
mod stt_languages;
mod vad;
mod voice;
mod voice_confirm;
mod voice_echo;
mod voice_household;
mod voice_languages;
mod voice_pauses;
mod voice_timers;
mod volume_skill;
mod wake;
