//! The one way tests wait for something: poll a condition until it holds or a limit
//! passes, instead of sleeping a fixed time and hoping.

use std::time::{Duration, Instant};

/// How often a condition is looked at again.
const EVERY: Duration = Duration::from_millis(20);

/// Polls `probe` until it returns `Some`, at most `limit`; panics naming `what` when the
/// limit passes, so a failing test says what it was waiting for.
pub fn wait_for<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + limit;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < until,
            "waited {limit:?} for {what}, and it did not happen"
        );
        std::thread::sleep(EVERY);
    }
}

/// Polls `probe` until it is true, at most `limit`; panics naming `what` otherwise.
pub fn wait_until(what: &str, limit: Duration, mut probe: impl FnMut() -> bool) {
    wait_for(what, limit, || probe().then_some(()));
}

/// The async twin of [`wait_for`], for tests on a tokio runtime.
pub async fn wait_for_async<T>(
    what: &str,
    limit: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let until = Instant::now() + limit;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < until,
            "waited {limit:?} for {what}, and it did not happen"
        );
        tokio::time::sleep(EVERY).await;
    }
}
