#!/usr/bin/env bash
# Held-out voices for benches/stt.rs and benches/rooms.rs: benches/stt/commands.txt
# spoken by synthesizers no test uses (flite's and festival's voices, Debian packages
# flite and festival with festvox-kdlpc16k and festvox-kallpc16k), as 16 kHz mono WAVs
# with 0.2 s of silence before and 0.6 s after (what the end-of-speech detector leaves
# around a command).
# `stt_voices.sh`: the commands alone, in target/stt-test/bench-heldout/VOICE-NN.{wav,txt};
# `stt_voices.sh wake`: each said after the wake phrase ("hey strawberry, <command>"), in
# target/stt-test/bench-heldout-wake (the .txt is the command alone).
# Redone when the commands, the voices or this script change.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
case $mode in
  "") out=target/stt-test/bench-heldout; prefix="" ;;
  wake) out=target/stt-test/bench-heldout-wake; prefix="hey strawberry, " ;;
  *) echo "usage: $0 [wake]" >&2; exit 2 ;;
esac
voices="flite:awb flite:rms flite:slt flite:kal16 festival:ked_diphone festival:kal_diphone"
stamp="$(cat benches/stt/commands.txt "$0"; echo "$voices $mode")"
if [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
rm -rf "$out" "$out.partial"
mkdir -p "$out.partial"
for pair in $voices; do
  engine=${pair%%:*}; voice=${pair#*:}
  n=0
  while IFS= read -r text; do
    [ -n "$text" ] || continue
    n=$((n + 1))
    name="$out.partial/$engine-$voice-$(printf %02d "$n")"
    case $engine in
      flite) flite -voice "$voice" -t "$prefix$text" -o "$name.raw.wav" ;;
      festival) printf '%s\n' "$prefix$text" > "$name.in.txt"
        text2wave -eval "(voice_$voice)" -o "$name.raw.wav" "$name.in.txt"
        rm "$name.in.txt" ;;
    esac
    sox -q "$name.raw.wav" -r 16000 -c 1 -b 16 "$name.wav" pad 0.2 0.6
    printf '%s\n' "$text" > "$name.txt"
    rm "$name.raw.wav"
  done < benches/stt/commands.txt
done
printf '%s' "$stamp" > "$out.partial/.stamp"
mv "$out.partial" "$out"
