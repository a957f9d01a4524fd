//! Builds the sandbox guest (`src/guest/`, Rhai compiled to wasm), pre-initialises it
//! with wizer so every instance starts with a ready Rhai engine, and precompiles the
//! result for the target architecture, so the daemon needs no wasm compiler and
//! starts a sandbox in microseconds.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::task::{Context, Poll, Waker};
use std::{env, fs};

use wasmtime::{Engine, Instance, Linker, Module, Store};
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

include!("src/sandbox/engine_config.rs");

const GUEST_TARGET: &str = "wasm32-unknown-unknown";

fn main() {
    let manifest_dir = PathBuf::from(env_var("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env_var("OUT_DIR"));
    let guest_dir = manifest_dir.join("src/guest");
    // Only paths that exist: Cargo reruns a build script on every build while one of
    // its paths is missing, and this one precompiles the guest, after which the whole
    // crate and every test binary build again.
    for path in [
        "src/guest/src",
        "src/guest/Cargo.toml",
        "src/guest/Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
    println!("cargo:rerun-if-changed=src/sandbox/engine_config.rs");

    let wasm = build_guest(&guest_dir, &out_dir);
    let snapshot = preinitialise(&wasm);
    let target = env_var("TARGET");
    let mut config = sandbox_engine_config();
    // An explicit target also means baseline CPU features rather than the build
    // machine's, so the binary runs on any CPU of the architecture.
    if let Err(e) = config.target(&target) {
        panic!("wasmtime cannot compile for {target}: {e:?}");
    }
    let engine = Engine::new(&config)
        .unwrap_or_else(|e| panic!("cannot build the wasmtime engine for {target}: {e:?}"));
    let cwasm = engine
        .precompile_module(&snapshot)
        .unwrap_or_else(|e| panic!("cannot precompile the sandbox guest for {target}: {e:?}"));
    let dest = out_dir.join("guest.cwasm");
    fs::write(&dest, cwasm).unwrap_or_else(|e| panic!("cannot write {}: {e}", dest.display()));
}

fn env_var(name: &str) -> String {
    env::var(name).unwrap_or_else(|_| panic!("cargo did not set {name} for build.rs"))
}

/// Runs a nested `cargo build` of the guest and returns the wasm it produced.
fn build_guest(guest_dir: &Path, out_dir: &Path) -> Vec<u8> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(sysroot) = sysroot
        && !sysroot.join("lib/rustlib").join(GUEST_TARGET).exists()
    {
        panic!(
            "the sandbox guest needs the {GUEST_TARGET} target, which is not installed; \
             run: rustup target add {GUEST_TARGET}"
        );
    }

    // One guest build shared by every profile of the outer build (test, clippy,
    // release...), next to the outer target dir's other output.
    let target_dir = out_dir
        .ancestors()
        .find(|dir| dir.join("CACHEDIR.TAG").exists())
        .map(|dir| dir.join("guest"))
        .unwrap_or_else(|| out_dir.join("guest-target"));

    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(guest_dir)
        .args(["build", "--release", "--locked", "--target", GUEST_TARGET])
        .arg("--manifest-path")
        .arg(guest_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    if let Ok(jobs) = env::var("NUM_JOBS") {
        command.args(["-j", &jobs]);
    }
    // The outer build's flags, target, profile and wrappers are meant for the host
    // crate; the guest is configured by its own manifest.
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let inherited = matches!(
            key,
            "RUSTFLAGS"
                | "RUSTDOCFLAGS"
                | "RUSTC_WRAPPER"
                | "RUSTC_WORKSPACE_WRAPPER"
                | "CARGO_ENCODED_RUSTFLAGS"
                | "CARGO_ENCODED_RUSTDOCFLAGS"
                | "CARGO_TARGET_DIR"
                | "CARGO_BUILD_TARGET"
                | "CARGO_BUILD_TARGET_DIR"
                | "CARGO_BUILD_RUSTFLAGS"
                | "CARGO_PRIMARY_PACKAGE"
                | "TARGET"
                | "HOST"
                | "OUT_DIR"
                | "OPT_LEVEL"
                | "PROFILE"
                | "DEBUG"
                | "NUM_JOBS"
        ) || [
            "CARGO_PROFILE_",
            "CARGO_CFG_",
            "CARGO_FEATURE_",
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
        ]
        .iter()
        .any(|prefix| key.starts_with(prefix));
        if inherited {
            command.env_remove(key);
        }
    }
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the sandbox guest: {e}"));
    if !status.success() {
        panic!("building the sandbox guest (src/guest/) failed: {status}; see the output above");
    }
    let wasm = target_dir
        .join(GUEST_TARGET)
        .join("release/strawberry_spoke_guest.wasm");
    fs::read(&wasm).unwrap_or_else(|e| panic!("cannot read {}: {e}", wasm.display()))
}

/// Runs the guest's `init` (building its Rhai engine) and snapshots the result.
fn preinitialise(wasm: &[u8]) -> Vec<u8> {
    let mut wizer = Wizer::new();
    wizer.init_func("init");
    let (cx, instrumented) = wizer
        .instrument(wasm)
        .unwrap_or_else(|e| panic!("wizer cannot instrument the sandbox guest: {e:?}"));

    let engine = Engine::default();
    let module = Module::new(&engine, &instrumented)
        .unwrap_or_else(|e| panic!("cannot compile the instrumented guest: {e:?}"));
    let mut linker = Linker::new(&engine);
    linker
        .func_wrap("spoke", "call", |_: u32, _: u32| -> wasmtime::Result<u64> {
            wasmtime::bail!("the guest's init must not call the device bridge")
        })
        .unwrap_or_else(|e| panic!("cannot define the device bridge: {e:?}"));
    let mut store = Store::new(&engine, ());
    let instance = linker
        .instantiate(&mut store, &module)
        .unwrap_or_else(|e| panic!("cannot instantiate the instrumented guest: {e:?}"));
    instance
        .get_typed_func::<(), ()>(&mut store, "init")
        .and_then(|init| init.call(&mut store, ()))
        .unwrap_or_else(|e| panic!("the guest's init failed: {e:?}"));

    let mut state = Snapshotted {
        store: &mut store,
        instance,
    };
    block_on(wizer.snapshot(&cx, &mut state))
        .unwrap_or_else(|e| panic!("wizer cannot snapshot the sandbox guest: {e:?}"))
}

/// Wizer's view of the initialised instance.
struct Snapshotted<'a> {
    store: &'a mut Store<()>,
    instance: Instance,
}

impl InstanceState for Snapshotted<'_> {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        let global = self
            .instance
            .get_global(&mut *self.store, name)
            .unwrap_or_else(|| panic!("wizer asked for a missing global {name}"));
        match global.get(&mut *self.store) {
            wasmtime::Val::I32(x) => SnapshotVal::I32(x),
            wasmtime::Val::I64(x) => SnapshotVal::I64(x),
            wasmtime::Val::F32(x) => SnapshotVal::F32(x),
            wasmtime::Val::F64(x) => SnapshotVal::F64(x),
            wasmtime::Val::V128(x) => SnapshotVal::V128(x.as_u128()),
            other => panic!("global {name} holds {other:?}, which wizer cannot snapshot"),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        let memory = self
            .instance
            .get_memory(&mut *self.store, name)
            .unwrap_or_else(|| panic!("wizer asked for a missing memory {name}"));
        contents(memory.data(&*self.store))
    }
}

/// Wizer's snapshot futures never wait on anything (our `InstanceState` answers at
/// once), so polling once with a no-op waker completes them.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("wizer's snapshot did not complete in one poll"),
    }
}
