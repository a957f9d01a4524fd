//! The time budget of the work running on this thread: a sandbox run and the skill
//! calls it makes.
//!
//! A sandbox run installs its total deadline (`sandbox.total_timeout_ms`) and its
//! [`Cancel`] token with [`with_run`]; a skill call installs its own timeout with
//! [`with_deadline`], which can only shorten what the run has left. Rhai's progress
//! callback and everything that blocks on behalf of a call or run (commands, HTTP,
//! sleeps, confirmations, remote calls) reads [`bounded`] for how long it may wait and,
//! when that is longer than [`SLICE`], waits in slices re-checking [`expired`], which
//! is also true once the run was cancelled (barge-in, the stop phrase, shutdown). So a
//! slow or stuck skill cannot outlive its call or its run, and a cancelled turn stops
//! within a slice. The time a call takes is never charged to the sandboxed script's
//! own budget (`sandbox.timeout_ms`); it is charged to the run's total.
//!
//! This is the one way a run is stopped: its token is a child in the daemon's
//! cancellation tree (see `docs/architecture.md`, "How stopping works"), so shutting
//! the daemon down cancels it; the turn also cancels it when it is dropped (barge-in,
//! see [`Cancel::cancel_on_drop`]); the sandbox's clock and every blocking wait read it.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// Longest a blocking wait on behalf of a run goes without re-checking [`expired`]:
/// how late a cancellation may be noticed.
pub const SLICE: Duration = Duration::from_millis(50);

/// Cancels one sandbox run (or transcription) from another thread or task. Cheap to
/// clone; all clones share one token, which is never reset.
#[derive(Debug, Clone, Default)]
pub struct Cancel(CancellationToken);

impl Cancel {
    /// A token of its own, not cancelled yet (a one-shot command's run).
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// A token that is also cancelled when `parent` is (the daemon stopping).
    pub fn child_of(parent: &CancellationToken) -> Cancel {
        Cancel(parent.child_token())
    }

    /// Asks the run to stop: the sandbox ends it at its next clock tick, and every
    /// wait on its behalf stops within a [`SLICE`].
    pub fn cancel(&self) {
        self.0.cancel();
    }

    /// Whether it was cancelled, itself or through its parent.
    pub fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }

    /// A guard that cancels this token when dropped: held by the async task that waits
    /// for the run, so aborting that task (barge-in, shutdown) stops the run too.
    pub fn cancel_on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(self.clone())
    }
}

/// Cancels its token when dropped; see [`Cancel::cancel_on_drop`].
#[derive(Debug)]
pub struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// What bounds the work on this thread.
#[derive(Clone, Default)]
struct Budget {
    deadline: Option<Instant>,
    cancel: Option<Cancel>,
    /// The deadline is the sandbox run's, not a skill call's own.
    by_run: bool,
}

thread_local! {
    static BUDGET: RefCell<Budget> = RefCell::new(Budget::default());
}

/// Runs `f` as a sandbox run that must end by `deadline` and stops when `cancel` is
/// cancelled, restoring the outer budget afterwards.
pub fn with_run<R>(deadline: Instant, cancel: &Cancel, f: impl FnOnce() -> R) -> R {
    with_budget(
        Budget {
            deadline: Some(deadline),
            cancel: Some(cancel.clone()),
            by_run: true,
        },
        f,
    )
}

/// Runs `f` as a call that must end by `deadline`, or earlier if the run or call it
/// is part of ends earlier; the outer budget is restored afterwards (a skill may be
/// called while another call is running on this thread).
pub fn with_deadline<R>(deadline: Instant, f: impl FnOnce() -> R) -> R {
    let outer = BUDGET.with(|b| b.borrow().clone());
    let budget = match outer.deadline {
        Some(at) if at < deadline => Budget {
            deadline: Some(at),
            ..outer
        },
        _ => Budget {
            deadline: Some(deadline),
            cancel: outer.cancel,
            by_run: false,
        },
    };
    with_budget(budget, f)
}

fn with_budget<R>(budget: Budget, f: impl FnOnce() -> R) -> R {
    let outer = BUDGET.with(|b| b.replace(budget));
    let restore = Restore(Some(outer));
    let result = f();
    drop(restore);
    result
}

/// Puts the outer budget back, also when `f` unwinds.
struct Restore(Option<Budget>);

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(outer) = self.0.take() {
            BUDGET.with(|b| *b.borrow_mut() = outer);
        }
    }
}

/// Time left of the current call or run (zero once the run was cancelled); `None`
/// outside any.
pub fn remaining() -> Option<Duration> {
    BUDGET.with(|b| {
        let b = b.borrow();
        if b.cancel.as_ref().is_some_and(Cancel::is_cancelled) {
            return Some(Duration::ZERO);
        }
        b.deadline
            .map(|at| at.saturating_duration_since(Instant::now()))
    })
}

/// Whether the current call or run has run out of time or was cancelled.
pub fn expired() -> bool {
    remaining().is_some_and(|left| left.is_zero())
}

/// Whether the run this thread works for was cancelled (as opposed to out of time).
pub fn cancelled() -> bool {
    BUDGET.with(|b| b.borrow().cancel.as_ref().is_some_and(Cancel::is_cancelled))
}

/// Whether the deadline in force is the sandbox run's total (`sandbox.total_timeout_ms`)
/// rather than the skill call's own timeout: says which one to name in an error.
pub fn bound_by_run() -> bool {
    BUDGET.with(|b| b.borrow().by_run)
}

/// `wanted`, shortened to what is left of the current call or run.
pub fn bounded(wanted: Duration) -> Duration {
    remaining().map_or(wanted, |left| left.min(wanted))
}

/// Sleeps for `duration` in slices of at most [`SLICE`]; returns false, early, when
/// the current call or run expires or is cancelled first.
pub fn sleep(duration: Duration) -> bool {
    let until = Instant::now() + duration;
    loop {
        if expired() {
            return false;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(SLICE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_inside_a_run_gets_at_most_what_the_run_has_left() {
        let now = Instant::now();
        let cancel = Cancel::new();
        with_run(now + Duration::from_secs(1), &cancel, || {
            with_deadline(now + Duration::from_secs(10), || {
                assert!(remaining().is_some_and(|left| left <= Duration::from_secs(1)));
                assert!(bound_by_run());
            });
            with_deadline(now + Duration::from_millis(10), || assert!(!bound_by_run()));
        });
        assert_eq!(remaining(), None);
    }

    #[test]
    fn cancelling_expires_the_run_and_its_calls() {
        let cancel = Cancel::new();
        with_run(Instant::now() + Duration::from_secs(60), &cancel, || {
            with_deadline(Instant::now() + Duration::from_secs(60), || {
                assert!(!expired());
                drop(cancel.cancel_on_drop());
                assert!(expired() && cancelled());
                assert_eq!(bounded(Duration::from_secs(5)), Duration::ZERO);
                assert!(!sleep(Duration::from_secs(5)));
            });
        });
        assert!(!expired() && !cancelled());
    }
}
