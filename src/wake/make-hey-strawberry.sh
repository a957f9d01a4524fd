#!/usr/bin/env bash
# Regenerates the bundled wake word src/wake/hey_strawberry.rpw.
#
# espeak-ng says "hey strawberry" in ten voice/speed pairs; `strawberry-spoke wakeword
# train` cuts each to its speech and builds a rustpotter reference word from them.
# The voices here must stay disjoint from the unseen voices tests/setup.sh uses for
# tests/wake.rs, or that test stops measuring anything.
#
# Usage: src/wake/make-hey-strawberry.sh [path/to/strawberry-spoke]
# (default: builds the debug binary). Needs espeak-ng and sox. The result depends on
# the espeak-ng version (1.51 made the committed file).
set -euo pipefail
cd "$(dirname "$0")/../.."
spoke=${1:-}
if [ -z "$spoke" ]; then
  cargo build --quiet
  spoke="${CARGO_TARGET_DIR:-target}/debug/strawberry-spoke"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
voices="en-us:150 en-us+f2:170 en-gb:140 en-gb+m3:165 en-us+m5:155 en-gb-x-rp+f4:150 en-029:160 en-gb-x-gbcwmd+m2:145 en-us+f5:180 en-gb+m6:135"
i=0
for pair in $voices; do
  voice=${pair%:*}
  speed=${pair#*:}
  i=$((i + 1))
  espeak-ng -v "$voice" -s "$speed" -w "$work/raw.wav" "hey strawberry"
  sox -q "$work/raw.wav" -r 16000 -c 1 -b 16 "$work/$(printf %02d $i)-${voice//+/_}.wav"
done
"$spoke" wakeword train --name "hey strawberry" -o src/wake/hey_strawberry.rpw "$work"/[0-9]*.wav
