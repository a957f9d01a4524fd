"""What a second look by Whisper would add to the bundled word: a measurement, not (yet)
the daemon's behaviour.

The misses that keep the quiet room under its floor are phrases whose score rises over
the threshold but does not stay there for the 24 frames round 8's rule asked then (BENCHMARKS.md,
"Round 8" and "Round 9"); shorter rules at any threshold wake on the dev negatives. A
second stage could hear them instead: a loose rule (LOOSE: threshold and frames) marks a
candidate, and the spoke's own speech model (Whisper, `strawberry-spoke transcribe`
with `stt.language = "en"`) must read "hey strawberry" (MATCH) in the audio around it;
what the word's own rule (its `medium` point and `min_frames`) hears wakes as today.
This script simulates that over the recordings gen.py writes: each phrase counts as
heard when the word's rule hears it, or the loose rule fires near its end (as
calibrate.py's `heard_at`) and Whisper reads the phrase in the window; each negative
candidate Whisper reads as the phrase is a false wake.

Usage (in this directory, after `python3 gen.py eval-dev` or `gen.py eval-test`, and
`cargo build`):
  SPLIT=eval-dev STT=/path/ggml-base-q8_0.bin python3 second_look.py 0.852:4,0.3:6
SPLIT is eval-dev (choose here) or eval (the held-out set: measure once, with what dev
chose). Each loose rule is THRESHOLD:FRAMES.
"""

import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from scipy.io import wavfile

import calibrate as C
import common
from common import CACHE, HOP, SR, WIN

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("SPOKE", os.path.join(HERE, "../../../target/debug/strawberry-spoke"))
MODEL = os.path.abspath(os.environ.get("STT", os.path.join(HERE, "../../../models/ggml-base-q8_0.bin")))
WORD = os.environ.get("WORD", os.path.join(HERE, "../hey_strawberry.wake"))
SPLIT = os.environ.get("SPLIT", "eval-dev")
# The window Whisper hears: from 2 s before the loose rule fired to 0.4 s after (the
# phrase is ~1 s long and the loose rule fires near its end).
BEFORE, AFTER = 2.0, 0.4
# What counts as the phrase in Whisper's text (lower case, letters only): chosen on the
# dev split, where Whisper reads the phrase as "hey strawberry", "hi strawberry",
# "a strawberry", "i strawberry".
MATCH = re.compile(r"\b(hey|hay|hi|a|i|eh|ey)\b ?straw ?ber")
ROOMS = ("quiet", "reverb", "noise10", "babble5")


def fire_time(frame):
    return (frame * HOP + WIN) / SR


def transcribe(config, x, t):
    lo, hi = max(0, int((t - BEFORE) * SR)), min(len(x), int((t + AFTER) * SR))
    with tempfile.NamedTemporaryFile(suffix=".wav") as w:
        wavfile.write(w.name, SR, (np.clip(x[lo:hi], -1, 1) * 32767).astype(np.int16))
        p = subprocess.run([BIN, "--config", config, "transcribe", w.name],
                           capture_output=True, text=True, check=True)
    return p.stdout.strip()


def heard(text):
    return MATCH.search(" ".join(re.sub(r"[^a-z ]", " ", text.lower()).split())) is not None


def group(path):
    name = os.path.basename(path)
    if SPLIT == "eval-dev":
        return C.group_of(path)
    if "pitch" in name:
        return "pitched"
    return name.split("_")[0].replace("espeak-ng", "espeak")


def main():
    loose = [(float(t), int(k)) for t, k in (r.split(":") for r in sys.argv[1].split(","))]
    h, a = C.read_model(WORD)
    firm = (h["operating_points"]["medium"], h["min_frames"])
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as cfg:
        cfg.write(f'[stt]\nmodel = "{MODEL}"\nlanguage = "en"\n')
    root = os.path.join(CACHE, SPLIT)
    texts = {}

    def check(path, x, t):
        key = (path, round(t, 2))
        if key not in texts:
            texts[key] = transcribe(cfg.name, x, t)
        return heard(texts[key]), texts[key]

    rooms = {}
    for room in ROOMS:
        for path, x, end in C.load_wavs(os.path.join(root, room)):
            s = C.scores_of(h, a, x)
            by_rule = C.heard_at(s, end, *firm) is not None
            for th, k in loose:
                near = [t for t in (fire_time(f) for _, f in C.events(s, th, k))
                        if -0.3 <= t - end <= 1.0]
                second = False
                if near and not by_rule:
                    second, text = check(path, x, near[0])
                    print(f"candidate {room} {os.path.basename(path)} ({th}:{k}): "
                          f"{text!r} -> {'woke' if second else 'no'}", flush=True)
                r = rooms.setdefault((th, k, room, group(path)), [0, 0, 0])
                r[0] += 1
                r[1] += by_rule
                r[2] += by_rule or second
    negatives = {}
    for path, x, _ in C.load_wavs(os.path.join(root, "negative")):
        s = C.scores_of(h, a, x)
        for th, k in loose:
            n = negatives.setdefault((th, k), [0, 0, 0, 0.0])
            n[0] += len(C.events(s, *firm))
            n[3] += len(x) / SR / 3600
            for t in (fire_time(f) for _, f in C.events(s, th, k)):
                n[1] += 1
                woke, text = check(path, x, t)
                if woke:
                    n[2] += 1
                    print(f"false wake {os.path.basename(path)} at {t:.1f} s ({th}:{k}): "
                          f"{text!r}", flush=True)
    groups = sorted({g for (_, _, _, g) in rooms})
    for th, k in loose:
        print(f"loose rule: {k} frames over {th}; the word's own rule: {firm[1]} frames "
              f"over {firm[0]:.3f}")
        for room in ROOMS:
            total = [sum(rooms[(th, k, room, g)][i] for g in groups) for i in range(3)]
            per = "; ".join(f"{g} {rooms[(th, k, room, g)][1]} -> {rooms[(th, k, room, g)][2]}"
                            f" of {rooms[(th, k, room, g)][0]}" for g in groups)
            print(f"  {room}: {total[1] / total[0]:.1%} -> {total[2] / total[0]:.1%} ({per})")
        n = negatives[(th, k)]
        print(f"  negatives {n[3]:.2f} h: the rule's wakes {n[0]}, candidates {n[1]} "
              f"({n[1] / n[3]:.1f} an hour), read as the phrase {n[2]}")


if __name__ == "__main__":
    common.usage(__doc__, len(sys.argv) == 2 and all(
        re.fullmatch(r"[0-9.]+:[0-9]+", r) for r in sys.argv[1].split(",")))
    main()
