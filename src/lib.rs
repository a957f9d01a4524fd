//! strawberry-spoke turns a small board with a microphone and a speaker into a voice
//! assistant: the "spoke" of a hub-and-spoke assistant.
//!
//! The model that answers runs on the hub; what it decides to do reaches this device as
//! Rhai code, which runs in a wasmtime [`sandbox`] whose only way out is the [`device`]
//! API. That API reaches the [`skills`]: trusted `.rhai` files a hobbyist drops into a
//! folder, run on the host with real capabilities.
//!
//! Modules, one concern each:
//! - [`config`]: the TOML file, environment overrides, defaults.
//! - [`skills`]: loading skill files, their documented signatures, search, the call
//!   policy.
//! - [`host`]: what a skill's code may do on the host: commands, HTTP, speech, time,
//!   storage, the timer schedule, and the daemon's services lent to skills.
//! - [`embed`]: the sentence-embedding model (a BERT forward pass) search uses.
//! - [`deadline`]: a sandbox run's time budget, which skill calls and host functions
//!   share.
//! - [`sandbox`]: the wasmtime instance that runs model-written code.
//! - [`device`]: the `device` object model code sees, wired to the skill registry.
//! - [`mcp`]: MCP servers (`mcpServers` file) as skill classes.
//! - [`mqtt`]: the link to the hub's broker: presence, registration, calls across devices.
//! - [`daemon`]: the long-running spoke: `serve` (skills with hot reload and the link)
//!   and `run` (that, plus the voice loop: wake word, command, reply; systemd).
//! - [`hub`]: the OpenAI-compatible client for the model on the hub.
//! - [`agent`]: the conversation loop: prompt, streamed reply, code runs, memory.
//! - [`audio`]: the microphone (cpal) or a WAV file as 16 kHz mono frames, pre-roll;
//!   the speaker, cues.
//! - [`vad`]: when a spoken command has ended.
//! - [`stt`]: speech to text on the device (whisper.cpp), importing faster-whisper models.
//! - [`text`]: text from outside the process made safe to show (no control characters).
//! - [`tts`]: speaking replies (espeak-ng, piper), sentence by sentence as they stream.
//! - [`wake`]: the wake word detector (rustpotter) and making wake words from recordings.
//! - [`cli`]: the command line.

pub mod agent;
pub mod app;
pub mod audio;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod deadline;
pub mod device;
pub mod embed;
pub mod host;
pub mod hub;
pub mod mcp;
pub mod mqtt;
pub mod sandbox;
pub mod skills;
pub mod stt;
pub mod text;
pub mod tts;
pub mod vad;
pub mod wake;
