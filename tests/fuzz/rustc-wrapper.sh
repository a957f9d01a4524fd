#!/bin/sh
# RUSTC_WRAPPER of the fuzz build (run.sh sets it). Adds libFuzzer's coverage
# instrumentation (stable -C flags, no -Z sanitizer) to the project crate and the fuzz
# crate only: wasmtime, cranelift, whisper.cpp and the rest are reused uninstrumented
# from the main target dir. The fuzz workspace gives both crates hashes of their own,
# so instrumented and plain builds never replace each other there.
rustc="$1"
shift
case "$CARGO_PKG_NAME" in
strawberry-spoke | strawberry-spoke-fuzz)
    case " $* " in
    *" --crate-name build_script_build "*) ;;
    *)
        exec "$rustc" "$@" \
            -Cpasses=sancov-module \
            -Cllvm-args=-sanitizer-coverage-level=4 \
            -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
            -Cllvm-args=-sanitizer-coverage-pc-table \
            -Cllvm-args=-sanitizer-coverage-trace-compares \
            -Cdebug-assertions -Coverflow-checks \
            --cfg fuzzing --check-cfg 'cfg(fuzzing)'
        ;;
    esac
    ;;
esac
exec "$rustc" "$@"
