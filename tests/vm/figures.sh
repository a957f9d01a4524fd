#!/usr/bin/env bash
# The figures tests/vm/checks takes inside the arm64 VM, taken the same way outside it,
# so BENCHMARKS.md ("arm64 under emulation") can give each VM figure next to peers from
# the same session:
#
#   bash tests/vm/figures.sh native      # this machine's x86-64 release binary
#   bash tests/vm/figures.sh qemu-user   # the aarch64 release binary under qemu-aarch64-static
#   bash tests/vm/figures.sh qemu-user listening   # only the wake word's and echo canceller's
#
# Run after tests/vm/run.sh (the sandbox and speech figures reuse that run's clip and
# faster-whisper models; `listening` needs only espeak-ng and sox, for
# tests/vm/make-audio.sh); for `native` after `cargo build --release`, for `qemu-user`
# with Debian's qemu-user-static; SPOKE_BIN names another binary (e.g. one built with
# `--target x86_64-unknown-linux-gnu`). Prints `FIGURE name value` lines with the same names
# as the VM's.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${SPOKE_VM_CACHE:-$root/target/vm}
case ${1:-} in
    native) spoke=("${SPOKE_BIN:-$root/target/release/strawberry-spoke}") ;;
    # Through the cross glibc's own loader: see cross.toml for why -L or LD_LIBRARY_PATH
    # alone hangs on the first thread.
    qemu-user) spoke=(qemu-aarch64-static /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1
        --library-path /usr/aarch64-linux-gnu/lib:/usr/lib/aarch64-linux-gnu
        "${SPOKE_BIN:-$root/target/aarch64-unknown-linux-gnu/release/strawberry-spoke}") ;;
    *) echo "usage: $0 native|qemu-user [listening]" >&2; exit 2 ;;
esac
[ "$1" = native ] || command -v qemu-aarch64-static >/dev/null || { echo "qemu-user: apt-get install qemu-user-static" >&2; exit 1; }
work=$cache/figures-$1
mkdir -p "$work"
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# What listening costs: the detector's and the canceller's own CPU time per second of
# audio, as `wakeword test` and `audio echo` report it (the VM's checks run the same).
audio=$cache/listening-audio
[ -s "$audio/heard.wav" ] || bash "$root/tests/vm/make-audio.sh" "$audio" >&2
for w in reference neural; do
    "${spoke[@]}" wakeword test "bundled-$w" "$audio/speech.wav" >"$work/wake.out"
    echo "FIGURE wake_${w}_cpu_ms_per_s $(sed -n 's/^  CPU: \([0-9.]*\) ms per second of audio.*/\1/p' "$work/wake.out")"
done
"${spoke[@]}" audio echo "$audio/played.wav" "$audio/heard.wav" >"$work/echo.out"
grep -q 'delay found' "$work/echo.out" || { cat "$work/echo.out" >&2; exit 1; }
echo "FIGURE echo_cpu_us_per_block $(sed -n 's/^  CPU: \([0-9]*\) [^ ]* per 10 ms block.*/\1/p' "$work/echo.out")"
[ "${2:-}" = listening ] && exit 0

[ -s "$cache/payload/clip.wav" ] || { echo "no $cache/payload/clip.wav: run tests/vm/run.sh first" >&2; exit 1; }
run_field() { sed -n "s/.*sandbox run.* $1=\([0-9]*\).*/\1/p" "$work/exec.err" | tail -n 1; }

debug=warn,strawberry_spoke::sandbox=debug
t0=$(now)
out=$(RUST_LOG=$debug "${spoke[@]}" exec -e 'print(40 + 2)' 2>"$work/exec.err")
[ "$out" = 42 ] || { echo "print(40 + 2) printed '$out'" >&2; exit 1; }
echo "FIGURE exec_process_s $(secs "$t0" "$(now)")"
echo "FIGURE sandbox_first_run_us $(run_field elapsed_us)"
RUST_LOG=$debug "${spoke[@]}" exec -e 'device.ClockSkill.now("").year' >/dev/null 2>"$work/exec.err"
echo "FIGURE device_call_one_us $(run_field device_time_us)"
RUST_LOG=$debug "${spoke[@]}" exec -e 'let y = 0; for i in 0..1000 { y = device.ClockSkill.now("").year; } y' >/dev/null 2>"$work/exec.err"
echo "FIGURE device_call_us $(($(run_field device_time_us) / 1000))"

for m in tiny base; do
    case $m in tiny) name=tiny.en-q8_0 ;; base) name=base-q8_0 ;; esac
    t0=$(now)
    "${spoke[@]}" model import-ct2 "$cache/payload/$m-ct2" "$work/ggml-$name.bin" --quantize q8_0 >/dev/null 2>&1
    echo "FIGURE import_ct2_${m}_s $(secs "$t0" "$(now)")"
    printf '[stt]\nmodel = "%s"\nthreads = 2\n' "$work/ggml-$name.bin" >"$work/stt.toml"
    "${spoke[@]}" --config "$work/stt.toml" transcribe "$cache/payload/clip.wav" >/dev/null 2>&1
    "${spoke[@]}" --config "$work/stt.toml" transcribe "$cache/payload/clip.wav" >"$work/stt.out" 2>"$work/stt.err"
    grep -qi kitchen "$work/stt.out" || { echo "$name heard: $(cat "$work/stt.out")" >&2; exit 1; }
    echo "FIGURE stt_${name}_inference_ms $(sed -n 's/.*inference \([0-9]*\) ms.*/\1/p' "$work/stt.err")"
done
