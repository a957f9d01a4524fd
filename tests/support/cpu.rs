//! Who shares the cores. The integration binary runs its tests two at a time, so a
//! test that feeds a daemon's microphone at real-time pace could land beside one that
//! keeps the cores busy, and Whisper's worker threads spin-wait: two transcriptions at
//! once on a 2-core machine slow each other several times over, and a real-time session
//! then hears its next utterance while the last one is still being transcribed (which,
//! correctly, interrupts it), or its follow-up window closes before the answer comes.
//!
//! So a test that must not have a heavy one beside it (real-time audio, CPU-bound work
//! that must finish within a wall-clock limit, a measure of the process's own memory)
//! takes [`quiet`], and a heavy one (Whisper, the embedding model, many wake word
//! passes, Home Assistant starting) takes [`heavy`]. Heavy tests may run beside each
//! other; quiet ones run one at a time (two real-time daemons would be two
//! transcriptions at once). A test that takes neither is light, and may run beside
//! anything.
//!
//! A tokio lock: fair (a waiting quiet test is not starved by a stream of heavy ones),
//! not poisoned by a failing test, and held across `.await` without blocking the
//! runtime.

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static CORES: RwLock<()> = RwLock::const_new(());

/// The cores with no heavy test and no other quiet one: waits for those running to
/// finish and keeps new ones waiting until the guard drops.
pub async fn quiet() -> RwLockWriteGuard<'static, ()> {
    CORES.write().await
}

/// [`quiet`] for a test without a runtime.
pub fn quiet_blocking() -> RwLockWriteGuard<'static, ()> {
    CORES.blocking_write()
}

/// A share of the cores for a CPU-heavy test: waits while a quiet test runs.
pub async fn heavy() -> RwLockReadGuard<'static, ()> {
    CORES.read().await
}

/// [`heavy`] for a test without a runtime.
pub fn heavy_blocking() -> RwLockReadGuard<'static, ()> {
    CORES.blocking_read()
}
