// The wasmtime settings that decide how the guest is compiled. build.rs
// `include!`s this file to precompile the guest and the runtime builds its engine
// from it, so the two cannot drift apart: a precompiled module only loads into an
// engine with the same settings. Only plain comments here (no `//!`), because
// `include!` takes items.

/// The compilation-relevant wasmtime settings shared by build.rs and the runtime.
pub fn sandbox_engine_config() -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    // Rust's wasm32 target emits reference-types and bulk-memory; wasmtime accepts
    // both without its `gc` feature (only GC-typed references need that), so the
    // guest is built with the target's default features and nothing is toggled.
    // The wall-clock limit: a ticker thread bumps the epoch and the store's deadline
    // callback decides whether the script's time is up.
    config.epoch_interruption(true);
    // Rhai recurses on the native stack; its own call-depth limit is meant to end
    // deep recursion first, this is the backstop. It must stay well below the 2 MiB
    // stack of ordinary Rust and tokio threads, since wasm runs on the caller's stack.
    config.max_wasm_stack(1024 * 1024);
    config
}
