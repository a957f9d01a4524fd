//! The deadline of the skill call running on this thread.
//!
//! A skill call has its own timeout. Rhai's progress callback and every blocking host
//! function (commands, HTTP, sleeps) read it, so one slow skill cannot outlive its
//! call, and the time it takes is never charged to the sandboxed script.

use std::cell::Cell;
use std::time::{Duration, Instant};

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Runs `f` with `deadline` as the current call's deadline, restoring the outer one
/// afterwards (a skill may be called while another call is running on this thread).
pub fn with_deadline<R>(deadline: Instant, f: impl FnOnce() -> R) -> R {
    let outer = DEADLINE.with(|d| d.replace(Some(deadline)));
    let restore = Restore(outer);
    let result = f();
    drop(restore);
    result
}

struct Restore(Option<Instant>);

impl Drop for Restore {
    fn drop(&mut self) {
        DEADLINE.with(|d| d.set(self.0));
    }
}

/// Time left before the current call's deadline; `None` outside any call.
pub fn remaining() -> Option<Duration> {
    DEADLINE
        .with(|d| d.get())
        .map(|at| at.saturating_duration_since(Instant::now()))
}

/// Whether the current call has run out of time.
pub fn expired() -> bool {
    remaining().is_some_and(|left| left.is_zero())
}

/// `wanted`, shortened to what is left of the current call.
pub fn bounded(wanted: Duration) -> Duration {
    remaining().map_or(wanted, |left| left.min(wanted))
}
