//! Replays the fuzz corpora (`tests/fuzz/corpus/<target>/`) through the fuzz targets
//! (`tests/fuzz/harness.rs`), uninstrumented, in the normal test suite: every input a
//! campaign kept, the seeds and any committed reproducer, stays handled. Seconds; the
//! campaigns themselves are `tests/fuzz/run.sh`.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;

#[path = "fuzz/harness.rs"]
mod harness;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a corpus directory entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no inputs", dir.display());
    for file in files {
        let data = std::fs::read(&file).expect("a readable corpus file");
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(&data))) {
            eprintln!("fuzz target `{target}` fails on {}", file.display());
            resume_unwind(panic);
        }
    }
}

#[test]
fn sse() {
    replay("sse", harness::sse);
}

#[test]
fn skill_file() {
    replay("skill_file", harness::skill_file);
}

#[test]
fn mqtt_payload() {
    replay("mqtt_payload", harness::mqtt_payload);
}

#[test]
fn wav() {
    replay("wav", harness::wav);
}

#[test]
fn config() {
    replay("config", harness::config);
}
