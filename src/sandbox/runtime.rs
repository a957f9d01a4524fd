//! The host side of the sandbox: a wasmtime engine with the precompiled guest, a
//! fresh instance per run, and the limits that end a run that misbehaves.
//!
//! The protocol with the guest (specified in full in `src/guest/src/lib.rs`): pointers
//! and lengths are `u32` offsets into guest memory, and a "packed" buffer is a `u64`
//! `(pointer << 32) | length`. The host writes the code into a buffer from the
//! guest's `alloc` export and calls `run(code, limits...)`, which returns the result
//! JSON packed (`{"kind": "ok" | "syntax" | "runtime" | "limit", "output", ...}`).
//! The guest's one import, `spoke.call(request, len) -> packed`, carries a JSON
//! [`DeviceRequest`]; the host answers `{"ok": true, "value": ..}` or
//! `{"ok": false, "error": ".."}` in a buffer it gets from `alloc`, which the guest
//! then owns. After a trap the host reads what was printed through `output()`.
//!
//! A run is stopped from outside the guest in two places: the epoch callback (every
//! [`TICK`] while the guest computes) and the device bridge (before and after each
//! device call, where the guest waits on the host). Both check the same three things:
//! the run's [`Cancel`] token, its total deadline and the script's own time. While a
//! device call blocks, [`deadline::with_run`] makes the skill or remote call see the
//! same deadline and token, so it returns early and the bridge ends the run.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Deserialize;
use wasmtime::{
    Caller, Enabled, Engine, InstanceAllocationStrategy, InstancePre, Linker, Memory, Module,
    PoolingAllocationConfig, ResourceLimiter, Store, Trap, TypedFunc, UpdateDeadline,
};

use super::engine_config::sandbox_engine_config;
use super::{DeviceHandler, DeviceRequest, LimitKind, Limits, RunError, RunOutcome};
use crate::deadline::{self, Cancel};

/// The guest, pre-initialised and compiled for this architecture by build.rs.
static GUEST: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/guest.cwasm"));

/// How often the ticker advances the epoch: the granularity of the wall-clock limit.
const TICK: Duration = Duration::from_millis(10);

/// Runs that may be in flight at once on one [`Sandbox`]; each holds one pooled
/// instance slot (a few GiB of reserved, not committed, address space).
const CONCURRENT_RUNS: u32 = 16;

/// JSON bytes the guest's result adds around the printed output and the value
/// (field names, quotes, the kind), rounded up generously.
const RESULT_FRAME_BYTES: usize = 1024;

/// Smallest pooled memory slot; comfortably above the guest's initial memory.
const MIN_SLOT_BYTES: usize = 16 * 1024 * 1024;

/// Bytes of a memory slot kept resident between runs, when PAGEMAP_SCAN exists.
const KEEP_RESIDENT_BYTES: usize = 4 * 1024 * 1024;

/// Why a [`Sandbox`] could not be created.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// wasmtime rejected the engine settings (e.g. it could not reserve memory for
    /// the instance pool).
    #[error("cannot create the sandbox's wasmtime engine: {0}")]
    Engine(String),
    /// The embedded guest does not load into this engine.
    #[error(
        "the embedded sandbox guest does not load: {0}; the binary was built for another \
         CPU or wasmtime version, rebuild it for this machine"
    )]
    Guest(String),
    /// The memory limit is below what the guest needs to start.
    #[error(
        "the sandbox memory limit of {given} bytes is below the {needed} bytes the \
         interpreter needs to start; raise it to at least {needed}"
    )]
    MemoryTooSmall {
        /// Bytes the guest's memory starts with.
        needed: u64,
        /// The configured limit.
        given: u64,
    },
    /// The epoch ticker thread could not be started.
    #[error("cannot start the sandbox's clock thread: {0}")]
    Ticker(std::io::Error),
}

/// Runs model-written Rhai in a fresh wasm instance per run (docs/architecture.md, "The sandbox").
///
/// Cheap to clone (all clones share one engine, instance pool and clock thread) and
/// safe to use from several threads at once, up to 16 concurrent runs.
/// [`Sandbox::run`] blocks the calling thread; call it from a blocking context (e.g.
/// `tokio::task::spawn_blocking`). The thread needs about 1.5 MiB of stack, which
/// ordinary Rust and tokio threads (2 MiB) have.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    pre: InstancePre<RunState>,
    limits: Limits,
    ticker: Arc<Ticker>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.ticker.shut_down();
    }
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// Loads the embedded guest into a new engine whose runs all get `limits`.
    pub fn new(limits: Limits) -> Result<Sandbox, SandboxError> {
        let mut config = sandbox_engine_config();
        // The pool's slots are at least as large as the guest's initial memory, so
        // a too-small limit is reported by the check below rather than as a load
        // failure; the per-run `MemoryCap` enforces the actual limit.
        let slot = usize::try_from(limits.memory_bytes)
            .unwrap_or(usize::MAX)
            .max(MIN_SLOT_BYTES);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_core_instances(CONCURRENT_RUNS)
            .total_memories(CONCURRENT_RUNS)
            .total_tables(CONCURRENT_RUNS)
            .max_memory_size(slot);
        // Where the kernel can tell which pages a run dirtied (PAGEMAP_SCAN, Linux
        // 6.7+), reset just those in place rather than dropping the slot's pages:
        // the next run then takes no page faults on the snapshot's engine (halves
        // cold start). Without it, keeping pages resident would mean copying the
        // whole ~1.5 MiB image back every run, so the default madvise reset stays.
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            pool.linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
                .pagemap_scan(Enabled::Yes);
        }
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).map_err(|e| SandboxError::Engine(format!("{e:#}")))?;

        // SAFETY: `GUEST` was produced by this crate's build.rs with
        // `Engine::precompile_module` and the same `sandbox_engine_config`; it is
        // not input from outside the build. wasmtime still checks that it was
        // compiled for this wasmtime version, settings and CPU.
        let module = unsafe { Module::deserialize(&engine, GUEST) }
            .map_err(|e| SandboxError::Guest(format!("{e:#}")))?;
        let needed = module
            .exports()
            .find_map(|e| e.ty().memory().map(|m| m.minimum() * 65536))
            .unwrap_or(0);
        if needed > limits.memory_bytes {
            return Err(SandboxError::MemoryTooSmall {
                needed,
                given: limits.memory_bytes,
            });
        }

        let mut linker = Linker::new(&engine);
        linker
            .func_wrap("spoke", "call", device_bridge)
            .map_err(|e| SandboxError::Guest(format!("{e:#}")))?;
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|e| SandboxError::Guest(format!("{e:#}")))?;

        let ticker = Ticker::start(&engine).map_err(SandboxError::Ticker)?;
        Ok(Sandbox {
            inner: Arc::new(Inner {
                engine,
                pre,
                limits,
                ticker,
            }),
        })
    }

    /// The limits every run gets.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Runs `code` in a fresh instance; `device` answers its device calls. Never
    /// panics and returns within the script's time limit not counting time spent
    /// inside `device`, and within the total time limit counting it (plus ~10 ms, and
    /// plus however long `device` ignores [`deadline::expired`]).
    pub fn run(&self, code: &str, device: &dyn DeviceHandler) -> RunOutcome {
        self.run_cancellable(code, device, &Cancel::new())
    }

    /// [`Sandbox::run`] that also ends, as [`RunError::Cancelled`], within ~10 ms of
    /// `cancel` being cancelled (plus however long a device call takes to notice).
    pub fn run_cancellable(
        &self,
        code: &str,
        device: &dyn DeviceHandler,
        cancel: &Cancel,
    ) -> RunOutcome {
        let started = Instant::now();
        let limits = &self.inner.limits;
        let ends = started + limits.total_time;
        deadline::with_run(ends, cancel, || self.run_in(code, device, cancel, started))
    }

    fn run_in(
        &self,
        code: &str,
        device: &dyn DeviceHandler,
        cancel: &Cancel,
        started: Instant,
    ) -> RunOutcome {
        let limits = &self.inner.limits;
        let _clock = self.inner.ticker.run_started();
        // SAFETY: the store, the only place this reference is kept, is a local of
        // this function and is dropped before it returns, so the reference never
        // outlives `device`. (wasmtime requires store data to be `'static`.)
        let handler: &'static dyn DeviceHandler = unsafe {
            std::mem::transmute::<&dyn DeviceHandler, &'static dyn DeviceHandler>(device)
        };
        let mut store = Store::new(
            &self.inner.engine,
            RunState {
                handler,
                memory_cap: MemoryCap {
                    bytes: usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX),
                    denied: false,
                },
                started,
                wall_time: limits.wall_time,
                total_time: limits.total_time,
                cancel: cancel.clone(),
                device_time: Duration::ZERO,
                device_calls: 0,
                stopped: None,
                finishing: false,
                bridge: None,
            },
        );
        store.limiter(|state| &mut state.memory_cap);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            let state = ctx.data_mut();
            if state.finishing {
                return Ok(UpdateDeadline::Continue(1));
            }
            match state.stop_reason() {
                Some(stop) => {
                    state.stopped = Some(stop);
                    Ok(UpdateDeadline::Interrupt)
                }
                None => Ok(UpdateDeadline::Continue(1)),
            }
        });

        let (output, result) = self.execute(&mut store, code);
        let state = store.into_data();
        let outcome = RunOutcome {
            output,
            result,
            elapsed: started.elapsed(),
            device_time: state.device_time,
            device_calls: state.device_calls,
        };
        tracing::debug!(
            elapsed_us = outcome.elapsed.as_micros() as u64,
            device_calls = outcome.device_calls,
            device_time_us = outcome.device_time.as_micros() as u64,
            result = match &outcome.result {
                Ok(_) => "ok".to_string(),
                Err(e) => e.to_string(),
            },
            "sandbox run"
        );
        outcome
    }

    fn execute(
        &self,
        store: &mut Store<RunState>,
        code: &str,
    ) -> (String, Result<serde_json::Value, RunError>) {
        let guest = match Guest::instantiate(&self.inner.pre, store) {
            Ok(guest) => guest,
            Err(e) => return (String::new(), Err(self.trap_error(store, &e))),
        };
        match guest.run(store, code, &self.inner.limits) {
            Ok(result) => result,
            Err(e) => {
                let error = self.trap_error(store, &e);
                store.data_mut().finishing = true;
                (guest.output(store), Err(error))
            }
        }
    }

    /// Names the limit (or failure) behind a trap or a failed instantiation.
    fn trap_error(&self, store: &Store<RunState>, error: &wasmtime::Error) -> RunError {
        let state = store.data();
        let limits = &self.inner.limits;
        if state.memory_cap.denied {
            return limit(
                LimitKind::Memory,
                format!(
                    "the script needed more than the {} MiB of memory it may use",
                    limits.memory_bytes / (1024 * 1024)
                ),
            );
        }
        match state.stopped {
            Some(Stop::Cancelled) => return RunError::Cancelled,
            Some(Stop::TotalTime) => {
                return limit(
                    LimitKind::TotalTime,
                    format!(
                        "the run took more than {:.1} s in all, skill calls included \
                         (sandbox.total_timeout_ms); make fewer or faster skill calls",
                        limits.total_time.as_secs_f64()
                    ),
                );
            }
            Some(Stop::ScriptTime) => {
                return limit(
                    LimitKind::Time,
                    format!(
                        "the script ran for more than {:.1} s (time inside skill calls not \
                         counted; sandbox.timeout_ms)",
                        limits.wall_time.as_secs_f64()
                    ),
                );
            }
            None => {}
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::StackOverflow) => limit(
                LimitKind::Depth,
                "calls are nested too deeply for the sandbox's stack".into(),
            ),
            // The guest is memory-safe Rust; the one way it reads out of bounds is
            // its shadow stack running past the bottom of memory in deep recursion.
            Some(Trap::MemoryOutOfBounds) => limit(
                LimitKind::Depth,
                "calls are nested too deeply for the sandbox's stack".into(),
            ),
            Some(Trap::Interrupt) => limit(
                LimitKind::Time,
                format!(
                    "the script ran for more than {:.1} s",
                    limits.wall_time.as_secs_f64()
                ),
            ),
            _ => RunError::Runtime {
                message: format!("the sandbox stopped: {error:#}"),
                line: 0,
                column: 0,
            },
        }
    }
}

fn limit(limit: LimitKind, message: String) -> RunError {
    RunError::Limit { limit, message }
}

/// Why the host stopped a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Its [`Cancel`] token was cancelled.
    Cancelled,
    /// [`Limits::total_time`] passed.
    TotalTime,
    /// The script's own time, [`Limits::wall_time`], passed.
    ScriptTime,
}

/// Per-run host state, the store's data.
struct RunState {
    handler: &'static dyn DeviceHandler,
    memory_cap: MemoryCap,
    started: Instant,
    wall_time: Duration,
    total_time: Duration,
    cancel: Cancel,
    device_time: Duration,
    device_calls: u32,
    /// Why the host stopped the script, if it did.
    stopped: Option<Stop>,
    /// The run is over; the host is only reading the output back.
    finishing: bool,
    /// The guest's memory and `alloc`, for the device bridge (looked up once).
    bridge: Option<(Memory, TypedFunc<u32, u32>)>,
}

impl RunState {
    /// Whether the run must stop now, and why.
    fn stop_reason(&self) -> Option<Stop> {
        let elapsed = self.started.elapsed();
        if self.cancel.is_cancelled() {
            Some(Stop::Cancelled)
        } else if elapsed >= self.total_time {
            Some(Stop::TotalTime)
        } else if elapsed.saturating_sub(self.device_time) >= self.wall_time {
            Some(Stop::ScriptTime)
        } else {
            None
        }
    }

    /// Records why the run stops and returns the trap that ends it, when it must.
    fn check(&mut self) -> wasmtime::Result<()> {
        match self.stop_reason() {
            Some(stop) => {
                self.stopped = Some(stop);
                Err(wasmtime::format_err!(
                    "the run was stopped by the host: {stop:?}"
                ))
            }
            None => Ok(()),
        }
    }
}

/// Caps the guest's linear memory and remembers a refused growth, so that the trap
/// that follows (the guest aborts when an allocation fails) is reported as the
/// memory limit.
struct MemoryCap {
    bytes: usize,
    denied: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.bytes {
            self.denied = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // The guest never grows its function table; a modest cap keeps it honest.
        Ok(desired <= 100_000)
    }
}

/// `run`'s parameters: code pointer and length, max operations, max string, array
/// and map sizes, max call and expression depths, output bytes.
type RunParams = (u32, u32, u64, u32, u32, u32, u32, u32, u32);

/// The exports of one instance.
struct Guest {
    memory: Memory,
    alloc: TypedFunc<u32, u32>,
    run: TypedFunc<RunParams, u64>,
    output: TypedFunc<(), u64>,
}

/// The guest's answer from `run`.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum GuestResult {
    Ok {
        output: String,
        value: serde_json::Value,
    },
    Syntax {
        output: String,
        message: String,
        line: usize,
        column: usize,
    },
    Runtime {
        output: String,
        message: String,
        line: usize,
        column: usize,
    },
    Limit {
        output: String,
        limit: LimitKind,
        message: String,
    },
}

impl Guest {
    fn instantiate(
        pre: &InstancePre<RunState>,
        store: &mut Store<RunState>,
    ) -> wasmtime::Result<Guest> {
        let instance = pre.instantiate(&mut *store)?;
        let guest = Guest {
            memory: instance
                .get_memory(&mut *store, "memory")
                .ok_or_else(|| wasmtime::format_err!("the guest exports no memory"))?,
            alloc: instance.get_typed_func(&mut *store, "alloc")?,
            run: instance.get_typed_func(&mut *store, "run")?,
            output: instance.get_typed_func(&mut *store, "output")?,
        };
        store.data_mut().bridge = Some((guest.memory, guest.alloc.clone()));
        Ok(guest)
    }

    /// Runs the script. `Err` is a trap (a limit enforced by the host, or a guest
    /// failure); everything the guest itself reports is in the `Ok` value.
    fn run(
        &self,
        store: &mut Store<RunState>,
        code: &str,
        limits: &Limits,
    ) -> wasmtime::Result<(String, Result<serde_json::Value, RunError>)> {
        let len = u32::try_from(code.len())
            .map_err(|_| wasmtime::format_err!("the code is larger than 4 GiB"))?;
        let ptr = self.alloc.call(&mut *store, len)?;
        self.memory
            .write(&mut *store, ptr as usize, code.as_bytes())?;
        let packed = self.run.call(
            &mut *store,
            (
                ptr,
                len,
                limits.max_operations,
                clamp(limits.max_string_size),
                clamp(limits.max_array_size),
                clamp(limits.max_map_size),
                clamp(limits.max_call_depth),
                clamp(limits.max_expr_depth),
                clamp(limits.output_bytes),
            ),
        )?;
        let bytes = read_packed(&self.memory, store, packed)
            .ok_or_else(|| wasmtime::format_err!("the guest returned an out-of-bounds result"))?;
        // The printed part is capped by the guest; anything much larger than both caps
        // is an oversized value, refused before the host parses it.
        let most = limits
            .result_bytes
            .saturating_add(limits.output_bytes.saturating_mul(6))
            .saturating_add(RESULT_FRAME_BYTES);
        if bytes.len() > most {
            return Ok((self.output(store), Err(value_too_large(limits))));
        }
        let result: GuestResult = serde_json::from_slice(bytes)
            .map_err(|e| wasmtime::format_err!("the guest returned an unreadable result: {e}"))?;
        Ok(match result {
            GuestResult::Ok { output, value } if json_len(&value) > limits.result_bytes => {
                (output, Err(value_too_large(limits)))
            }
            GuestResult::Ok { output, value } => (output, Ok(value)),
            GuestResult::Syntax {
                output,
                message,
                line,
                column,
            } => (
                output,
                Err(RunError::Syntax {
                    message,
                    line,
                    column,
                }),
            ),
            GuestResult::Runtime {
                output,
                message,
                line,
                column,
            } => (
                output,
                Err(RunError::Runtime {
                    message,
                    line,
                    column,
                }),
            ),
            GuestResult::Limit {
                output,
                limit,
                message,
            } => (output, Err(RunError::Limit { limit, message })),
        })
    }

    /// What the script printed before a trap ended it; empty if the guest's state
    /// does not allow reading it back.
    fn output(&self, store: &mut Store<RunState>) -> String {
        self.output
            .call(&mut *store, ())
            .ok()
            .filter(|&packed| packed != 0)
            .and_then(|packed| read_packed(&self.memory, store, packed))
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
            .unwrap_or_default()
    }
}

fn value_too_large(limits: &Limits) -> RunError {
    limit(
        LimitKind::Output,
        format!(
            "the script's value is more than the {} bytes (as JSON) a run may return \
             (sandbox.result_bytes); return less, such as a summary or the first few items",
            limits.result_bytes
        ),
    )
}

/// Length of `value` as compact JSON, counted without building the text.
fn json_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        // Writing to a counter cannot fail, and a `Value` always serialises.
        Err(_) => usize::MAX,
    }
}

fn clamp(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// The bytes a packed `(pointer << 32) | length` from the guest points at.
fn read_packed<'a>(memory: &Memory, store: &'a Store<RunState>, packed: u64) -> Option<&'a [u8]> {
    let ptr = usize::try_from(packed >> 32).ok()?;
    let len = usize::try_from(packed & 0xffff_ffff).ok()?;
    memory.data(store).get(ptr..ptr.checked_add(len)?)
}

/// `spoke.call`: reads a request from guest memory, asks the handler, and writes the
/// answer into a buffer from the guest's `alloc`. Every failure of the handler is an
/// answer the script can catch; only a broken guest traps.
fn device_bridge(mut caller: Caller<'_, RunState>, ptr: u32, len: u32) -> wasmtime::Result<u64> {
    let (memory, alloc) = caller
        .data()
        .bridge
        .clone()
        .ok_or_else(|| wasmtime::format_err!("the device bridge was called before `run`"))?;
    let start = ptr as usize;
    let request = start
        .checked_add(len as usize)
        .and_then(|end| memory.data(&caller).get(start..end))
        .ok_or_else(|| wasmtime::format_err!("the guest sent an out-of-bounds request"))?;
    let answer = match serde_json::from_slice::<DeviceRequest>(request) {
        Ok(request) => {
            caller.data_mut().check()?;
            let handler = caller.data().handler;
            let started = Instant::now();
            let result = catch_unwind(AssertUnwindSafe(|| handler.handle(request)))
                .unwrap_or_else(|_| Err("the skill handler crashed; see the daemon log".into()));
            let state = caller.data_mut();
            state.device_time += started.elapsed();
            state.device_calls += 1;
            // A call cut short by the run's end or cancellation fails inside the skill;
            // the script must not be able to catch that and carry on.
            state.check()?;
            match result {
                Ok(value) => serde_json::json!({"ok": true, "value": value}),
                Err(error) => serde_json::json!({"ok": false, "error": error}),
            }
        }
        Err(e) => {
            serde_json::json!({"ok": false, "error": format!("malformed device request: {e}")})
        }
    };
    let bytes = serde_json::to_vec(&answer)?;
    let answer_len = u32::try_from(bytes.len())
        .map_err(|_| wasmtime::format_err!("the device answer is larger than 4 GiB"))?;
    let answer_ptr = alloc.call(&mut caller, answer_len)?;
    memory.write(&mut caller, answer_ptr as usize, &bytes)?;
    Ok((u64::from(answer_ptr) << 32) | u64::from(answer_len))
}

/// Advances the engine's epoch every [`TICK`] while at least one run is in flight,
/// and sleeps otherwise (no wake-ups on an idle device).
struct Ticker {
    state: Mutex<TickerState>,
    wake: Condvar,
}

struct TickerState {
    active: usize,
    shut_down: bool,
}

impl Ticker {
    fn start(engine: &Engine) -> std::io::Result<Arc<Ticker>> {
        let ticker = Arc::new(Ticker {
            state: Mutex::new(TickerState {
                active: 0,
                shut_down: false,
            }),
            wake: Condvar::new(),
        });
        let engine = engine.weak();
        let shared = Arc::clone(&ticker);
        std::thread::Builder::new()
            .name("sandbox-clock".into())
            .spawn(move || {
                loop {
                    {
                        let mut state = shared.lock();
                        while state.active == 0 && !state.shut_down {
                            state = shared
                                .wake
                                .wait(state)
                                .unwrap_or_else(PoisonError::into_inner);
                        }
                        if state.shut_down {
                            return;
                        }
                    }
                    std::thread::sleep(TICK);
                    match engine.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => return,
                    }
                }
            })?;
        Ok(ticker)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TickerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run_started(self: &Arc<Self>) -> ActiveRun {
        self.lock().active += 1;
        self.wake.notify_all();
        ActiveRun(Arc::clone(self))
    }

    fn shut_down(&self) {
        self.lock().shut_down = true;
        self.wake.notify_all();
    }
}

/// Keeps the ticker going while a run is in flight.
struct ActiveRun(Arc<Ticker>);

impl Drop for ActiveRun {
    fn drop(&mut self) {
        self.0.lock().active -= 1;
    }
}
