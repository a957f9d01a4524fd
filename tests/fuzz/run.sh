#!/usr/bin/env bash
# Runs one fuzz campaign and folds what it found into the target's corpus.
#
#   tests/fuzz/run.sh TARGET SECONDS [libFuzzer flags...]
#
# TARGET is one of: sse skill_file mqtt_payload wav config (tests/fuzz/harness.rs).
# Builds the target instrumented (rustc-wrapper.sh), runs libFuzzer for SECONDS with the
# issue's limits (no allocation over 256 MiB, no input over 10 s, RSS under 2 GiB),
# then minimises corpus + new inputs back into tests/fuzz/corpus/TARGET
# (-set_cover_merge=1 on edge coverage).
# A finding stops the script before the merge; its input is in
# $CARGO_TARGET_DIR/fuzz/artifacts/TARGET/ (crash-*, oom-*, timeout-*).
# Uses the main crate's target dir (CARGO_TARGET_DIR, default ./target), so only
# strawberry-spoke and the fuzz crate are compiled; needs libFuzzer.a (build.rs).
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 TARGET SECONDS [libFuzzer flags...]" >&2
    exit 2
fi
target=$1
seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
corpus=$here/corpus/$target
if [ ! -d "$corpus" ]; then
    echo "$0: no corpus directory $corpus; targets: $(ls "$here/corpus" | tr '\n' ' ')" >&2
    exit 2
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$here/../../target}
export RUSTC_WRAPPER=$here/rustc-wrapper.sh
cargo build -j2 --manifest-path "$here/Cargo.toml" --bin "fuzz_$target"
binary=$CARGO_TARGET_DIR/debug/fuzz_$target
artifacts=$CARGO_TARGET_DIR/fuzz/artifacts/$target
found=$CARGO_TARGET_DIR/fuzz/found/$target
merged=$CARGO_TARGET_DIR/fuzz/merged/$target
rm -rf "$found" "$merged"
mkdir -p "$artifacts" "$found" "$merged"
limits=(-rss_limit_mb=2048 -malloc_limit_mb=256 -timeout=10)

# New inputs go to $found; the committed corpus is only read.
"$binary" "${limits[@]}" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$@" "$found" "$corpus"

# Edges only and a set cover: a few hundred small files rather than thousands.
"$binary" "${limits[@]}" -set_cover_merge=1 -use_counters=0 "$merged" "$corpus" "$found"
rm -rf "$corpus"
mv "$merged" "$corpus"
echo "corpus $target: $(ls "$corpus" | wc -l) files, $(du -sh "$corpus" | cut -f1)"
