//! Sandbox cost: cold start (fresh instance, trivial script, result) and one device
//! call through the bridge, next to the same scripts on native Rhai.
//!
//! Run with `cargo bench --bench sandbox`. After criterion's figures it prints a
//! summary with the per-call cost, derived as (script with N calls - the same loop
//! without calls) / N, and the sandbox/native ratios. See BENCHMARKS.md.

use std::any::TypeId;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use rhai::{Dynamic, Engine, EvalAltResult, ImmutableString, NativeCallContext};
use serde_json::Value;
use strawberry_spoke::sandbox::{DeviceHandler, DeviceRequest, Limits, Sandbox};

/// Calls made by the call-heavy script.
const CALLS: usize = 100;

const TRIVIAL: &str = "40 + 2";
const LOOP_WITH_CALLS: &str =
    "let t = 0; for i in 0..100 { t += device.Bench.echo(i, \"text\"); } t";
const LOOP_WITHOUT_CALLS: &str = "let t = 0; for i in 0..100 { t += i; } t";

/// Answers `Bench.echo(n, text)` with `n`: the arguments and the answer cross the
/// bridge as JSON like a real skill call's.
struct Echo;

impl DeviceHandler for Echo {
    fn handle(&self, request: DeviceRequest) -> Result<Value, String> {
        match request {
            DeviceRequest::Call { mut args, .. } if !args.is_empty() => Ok(args.swap_remove(0)),
            other => Err(format!("unexpected request {other:?}")),
        }
    }
}

/// `device` on native Rhai, built the way the guest builds it (indexer to a class
/// proxy, skill calls as raw functions, JSON marshalling both ways), minus wasm.
#[derive(Clone)]
struct NativeDevice;

#[derive(Clone)]
struct NativeClass(ImmutableString);

fn native_engine() -> Engine {
    let mut engine = Engine::new();
    engine.register_type::<NativeDevice>();
    engine.register_type::<NativeClass>();
    engine.register_indexer_get(|_: &mut NativeDevice, class: &str| NativeClass(class.into()));
    #[allow(deprecated)]
    engine.on_var(|name, _, _| Ok((name == "device").then(|| Dynamic::from(NativeDevice))));
    engine.register_raw_fn(
        "echo",
        [
            TypeId::of::<NativeClass>(),
            TypeId::of::<Dynamic>(),
            TypeId::of::<Dynamic>(),
        ],
        |ctx: NativeCallContext,
         args: &mut [&mut Dynamic]|
         -> Result<Dynamic, Box<EvalAltResult>> {
            let class = args[0].clone_cast::<NativeClass>();
            let json = args[1..]
                .iter()
                .map(|a| serde_json::to_value(&**a))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let request = serde_json::to_vec(&DeviceRequest::Call {
                device: None,
                class: class.0.to_string(),
                function: ctx.fn_name().to_string(),
                args: json,
            })
            .map_err(|e| e.to_string())?;
            let request: DeviceRequest =
                serde_json::from_slice(&request).map_err(|e| e.to_string())?;
            let answer = Echo.handle(request)?;
            let answer = serde_json::to_vec(&answer).map_err(|e| e.to_string())?;
            let answer: Value = serde_json::from_slice(&answer).map_err(|e| e.to_string())?;
            rhai::serde::to_dynamic(answer)
        },
    );
    engine
}

fn native_run(engine: &Engine, code: &str) -> Dynamic {
    engine
        .eval::<Dynamic>(code)
        .expect("the benchmark scripts run")
}

fn benches(c: &mut Criterion) {
    let sandbox = Sandbox::new(Limits::default()).expect("the sandbox starts");
    let engine = native_engine();
    for code in [TRIVIAL, LOOP_WITH_CALLS, LOOP_WITHOUT_CALLS] {
        let sandboxed = sandbox
            .run(code, &Echo)
            .result
            .expect("the benchmark scripts run");
        let native = serde_json::to_value(native_run(&engine, code)).expect("serialisable");
        assert_eq!(sandboxed, native, "{code}");
    }

    let mut group = c.benchmark_group("sandbox");
    group.bench_function("cold_start_trivial", |b| {
        b.iter(|| black_box(sandbox.run(black_box(TRIVIAL), &Echo)))
    });
    group.bench_function("loop_100_calls", |b| {
        b.iter(|| black_box(sandbox.run(black_box(LOOP_WITH_CALLS), &Echo)))
    });
    group.bench_function("loop_no_calls", |b| {
        b.iter(|| black_box(sandbox.run(black_box(LOOP_WITHOUT_CALLS), &Echo)))
    });
    group.finish();

    let mut group = c.benchmark_group("native");
    group.bench_function("trivial", |b| {
        b.iter(|| black_box(native_run(&engine, black_box(TRIVIAL))))
    });
    group.bench_function("loop_100_calls", |b| {
        b.iter(|| black_box(native_run(&engine, black_box(LOOP_WITH_CALLS))))
    });
    group.bench_function("loop_no_calls", |b| {
        b.iter(|| black_box(native_run(&engine, black_box(LOOP_WITHOUT_CALLS))))
    });
    group.finish();
}

/// Median of `runs` timings of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<_> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

/// The derived figures: per-call cost and sandbox/native ratios.
fn summary() {
    let sandbox = Sandbox::new(Limits::default()).expect("the sandbox starts");
    let engine = native_engine();
    let runs = 2000;
    let sandbox_time = |code: &'static str| {
        median(runs, || {
            let _ = black_box(sandbox.run(black_box(code), &Echo));
        })
    };
    let native_time = |code: &'static str| {
        median(runs, || {
            let _ = black_box(native_run(&engine, black_box(code)));
        })
    };
    let s_trivial = sandbox_time(TRIVIAL);
    let s_calls = sandbox_time(LOOP_WITH_CALLS);
    let s_loop = sandbox_time(LOOP_WITHOUT_CALLS);
    let n_trivial = native_time(TRIVIAL);
    let n_calls = native_time(LOOP_WITH_CALLS);
    let n_loop = native_time(LOOP_WITHOUT_CALLS);
    let per_call = |with: Duration, without: Duration| {
        with.saturating_sub(without).as_secs_f64() * 1e6 / CALLS as f64
    };
    let s_call = per_call(s_calls, s_loop);
    let n_call = per_call(n_calls, n_loop);
    println!("\nsummary (medians of {runs} runs each)");
    println!(
        "cold start + trivial script: sandbox {:.1} us, native {:.1} us, ratio {:.1}x",
        s_trivial.as_secs_f64() * 1e6,
        n_trivial.as_secs_f64() * 1e6,
        s_trivial.as_secs_f64() / n_trivial.as_secs_f64()
    );
    println!(
        "one device call: sandbox {s_call:.2} us, native {n_call:.2} us, ratio {:.1}x",
        s_call / n_call
    );
    println!(
        "100-call script: sandbox {:.1} us, native {:.1} us, ratio {:.1}x",
        s_calls.as_secs_f64() * 1e6,
        n_calls.as_secs_f64() * 1e6,
        s_calls.as_secs_f64() / n_calls.as_secs_f64()
    );
}

criterion_group!(sandbox_benches, benches);

fn main() {
    sandbox_benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
