//! What bounds a whole sandbox run, skill calls included: its total time and
//! cancellation from another thread. Real skill files under the real registry and
//! device, real wasm guest (issue 14).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use strawberry_spoke::device::Device;
use strawberry_spoke::host::HostSettings;
use strawberry_spoke::sandbox::{
    Cancel, DeviceHandler, DeviceRequest, LimitKind, Limits, RunError, Sandbox,
};
use strawberry_spoke::skills::Registry;
use strawberry_spoke::skills::policy::NeverConfirm;

use crate::support::poll;

/// The bound issue 14 sets for noticing a cancellation or the end of the run's time.
const SLACK: Duration = Duration::from_millis(500);

const NAP_SKILL: &str = r#"//! Naps, for tests.

/// Sleep a while.
///
/// @param ms: int  How long, in milliseconds.
/// @return int  The milliseconds slept.
fn nap(ms) {
    sleep_ms(ms);
    ms
}

/// Run `sleep` for a while.
///
/// @param seconds: string  How long.
/// @return int  The exit code.
fn wait(seconds) {
    command("sleep", [seconds]).code
}

/// Fetch a page.
///
/// @param url: string  What to fetch.
/// @return int  The status.
fn fetch(url) {
    http_get(url).status
}
"#;

struct Skills {
    device: Device,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

fn skills() -> Skills {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("nap.rhai"), NAP_SKILL).unwrap();
    let settings = HostSettings {
        data_dir: data.path().to_path_buf(),
        ..HostSettings::default()
    };
    let (registry, errors) = Registry::load(dir.path(), &settings);
    assert!(errors.is_empty(), "{errors:?}");
    Skills {
        device: Device::new("test", Arc::new(registry), Arc::new(NeverConfirm)),
        _dirs: (dir, data),
    }
}

/// Passes calls on to the device, counting the ones that started.
struct Counting<'a> {
    device: &'a Device,
    started: AtomicUsize,
}

impl DeviceHandler for Counting<'_> {
    fn handle(&self, request: DeviceRequest) -> Result<Value, String> {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.device.handle(request)
    }
}

#[test]
fn cancelling_a_run_stops_the_skill_it_waits_on() {
    let skills = skills();
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    // A server that accepts and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", silent.local_addr().unwrap());
    for code in [
        "device.NapSkill.nap(5000)".to_string(),
        "device.NapSkill.wait(\"5\")".to_string(),
        format!("device.NapSkill.fetch(\"{url}\")"),
    ] {
        let handler = Counting {
            device: &skills.device,
            started: AtomicUsize::new(0),
        };
        let cancel = Cancel::new();
        std::thread::scope(|scope| {
            let run = scope.spawn(|| sandbox.run_cancellable(&code, &handler, &cancel));
            poll::wait_until("the skill call to start", Duration::from_secs(5), || {
                handler.started.load(Ordering::SeqCst) == 1
            });
            let cancelled_at = Instant::now();
            cancel.cancel();
            poll::wait_until("the run to end after cancel", SLACK, || run.is_finished());
            let outcome = run.join().unwrap();
            assert_eq!(outcome.result, Err(RunError::Cancelled), "{code}");
            assert!(cancelled_at.elapsed() < SLACK, "{code}");
        });
    }
}

#[test]
fn a_skill_call_gets_no_more_than_the_run_has_left() {
    let skills = skills();
    let total = Duration::from_secs(1);
    let sandbox = Sandbox::new(Limits {
        total_time: total,
        ..Limits::default()
    })
    .unwrap();
    let started = Instant::now();
    // The call's own timeout (10 s) would allow the nap; the run's total does not, and
    // catching the failure does not let the script carry on.
    let outcome = sandbox.run(
        "try { device.NapSkill.nap(3000) } catch { 0 }\nloop { device.NapSkill.nap(10) }",
        &skills.device,
    );
    let took = started.elapsed();
    assert!(
        matches!(
            outcome.result,
            Err(RunError::Limit {
                limit: LimitKind::TotalTime,
                ..
            })
        ),
        "{:?}",
        outcome.result
    );
    assert!(took < total + SLACK, "took {took:?}");
}
