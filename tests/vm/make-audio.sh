#!/usr/bin/env bash
# The recordings the listening figures are taken over (what the wake word and the echo
# canceller cost a second of audio), made with espeak-ng and sox the same on every run, so
# the VM (tests/vm/run.sh puts them in its payload) and tests/vm/figures.sh (native and
# qemu-user) measure the same audio:
#
#   speech.wav   ordinary speech, no wake phrase: 4 espeak-ng voices, 16 sentences, about
#                a minute, over steady pink noise 40 dB down (what a spoke hears most of
#                the time; `wakeword test`)
#   played.wav   a reply as the speaker plays it: 6 sentences, en-us, 48 kHz (`audio echo`)
#   heard.wav    what the microphone hears meanwhile: the reply 80 ms later through a
#                reverberant room, 4 dB down, "hey strawberry" by another voice 8 s in,
#                and the same noise (16 kHz)
#
#   bash tests/vm/make-audio.sh DIR
set -euo pipefail

out=${1:?usage: $0 DIR}
# sox's dither and noise seeded the same on every run.
export SOX_OPTS=-R
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

sentences=(
    "The weather tomorrow will be cloudy with a chance of rain in the afternoon."
    "I put the kettle on and then I realised we had run out of milk again."
    "Could you remind me where I left the keys to the shed last weekend?"
    "The train to the city was twenty minutes late because of the fog."
)
# speak VOICE TEXT OUT.wav: 16 kHz mono, half a second of silence after it.
speak() {
    espeak-ng -v "$1" -s 160 -w "$tmp/raw.wav" "$2"
    sox -q "$tmp/raw.wav" -r 16000 -c 1 -b 16 "$3" pad 0 0.5
}
n=0
for voice in en-us en-gb+f3 en-029+m2 en-us+f4; do
    for s in "${sentences[@]}"; do
        n=$((n + 1))
        speak "$voice" "$s" "$tmp/s$(printf %02d $n).wav"
    done
done
sox -q "$tmp"/s??.wav "$tmp/talk.wav"
length=$(soxi -D "$tmp/talk.wav")
sox -q -n -r 16000 -c 1 -b 16 "$tmp/noise.wav" synth "$length" pinknoise vol -40dB
sox -q -m -v 1 "$tmp/talk.wav" -v 1 "$tmp/noise.wav" "$out/speech.wav"

rm -f "$tmp"/s??.wav
reply=(
    "Here is the forecast for today."
    "It will be dry and bright this morning with a light breeze from the west."
    "Cloud will build from the south during the afternoon."
    "There may be a shower or two by the evening, mostly over the hills."
    "Tonight will be mild, with the rain clearing before dawn."
    "Tomorrow looks sunny and warmer, with highs around twenty degrees."
)
n=0
for s in "${reply[@]}"; do
    n=$((n + 1))
    speak en-us "$s" "$tmp/s$(printf %02d $n).wav"
done
sox -q "$tmp"/s??.wav "$tmp/reply.wav"
sox -q "$tmp/reply.wav" -r 48000 "$out/played.wav"
length=$(soxi -D "$tmp/reply.wav")
sox -q "$tmp/reply.wav" "$tmp/echo.wav" pad 0.08 reverb 50 50 70 gain -4
speak en-gb+m3 "hey strawberry" "$tmp/phrase.wav"
sox -q "$tmp/phrase.wav" "$tmp/person.wav" pad 8 gain -14
sox -q -n -r 16000 -c 1 -b 16 "$tmp/noise.wav" synth "$length" pinknoise vol -40dB
sox -q -m -v 1 "$tmp/echo.wav" -v 1 "$tmp/person.wav" -v 1 "$tmp/noise.wav" "$out/heard.wav"
