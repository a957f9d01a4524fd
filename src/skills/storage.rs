//! Per-skill persistent key/value storage.

/// One skill's key/value store.
pub struct Store;
