"""The stop word: a keyword spotter for "stop" said over the spoke's own ring (issue 26),
made with the wake word's pipeline (voices, rooms, features and network: gen.py,
train.py, calibrate.py) and written to src/wake/stop.wake.

Why a spotter and not Whisper: over a ring, what the echo canceller leaves of the ring's
own words is in every clip Whisper reads, and tiny.en reads a person's "stop" there as
"time", "star" or "he's calm" about half the time (BENCHMARKS.md, "The speaker kept
open"). Priming or weighing Whisper towards "stop" made it read the ring's echo alone as
"Stop." too. A network trained on "stop" over rings' residual echo hears the word's
shape, not a sentence; Home Assistant's Voice PE runs microWakeWord's "stop" model while
a timer rings for the same reason.

What it is trained on (training voices only; dev voices choose the point; the held-out
voices of common.py are never used):
- positives: each training voice saying "stop" ("Stop!", "stop it", "okay, stop", ...),
  warped, in rooms, over what is left of a ring (its beeps and a timer's line, through a
  room, 6 dB louder than the person to 25 dB under) or the wake word's backgrounds;
- negatives: the ring's residual alone, timer lines, words that share sounds with "stop"
  ("top", "shop", "stock", "step", "star", "time"), "hey strawberry", commands and the
  wake pipeline's ordinary speech with every text that says "stop" left out.

Usage, after run.sh's `gen.py tts` and `gen.py eval-dev` (the wake word's utterances and
its two dev hours of speech, TV and noise; ~15 min on a fresh machine):
  export STOP_CACHE=~/.cache/strawberry/wake/stop
  python3 stop.py tts         # ~1 min: 6,400 utterances
  python3 stop.py feat        # ~18 min: 90 shards of 400 2.4 s clips
  WAKE_CACHE=$STOP_CACHE WAKE_NAME=stop WAKE_CHANNELS=128 WAKE_EPOCHS=12 python3 train.py
                              # ~19 min: 12 epochs of 32,000 clips, the best on dev kept
  python3 stop.py calibrate $STOP_CACHE/train/stop-c128.wake ../stop.wake   # ~3 min
  python3 stop.py eval        # ~2 min: 10 h (STOP_EVAL_HOURS) of held-out voices reading
                              # text that never says "stop", for false stops (measured only)
Times on the 2-core development machine shared with builds (2026-11-28), about 40 min in
all. Everything is cached under $STOP_CACHE and skipped when present.
"""

import glob
import json
import os
import re
import sys
from multiprocessing import Pool

import numpy as np
from scipy.signal import fftconvolve

import calibrate
import common
import gen
import texts
from common import SR, HOP

STOP_CACHE = os.environ.get("STOP_CACHE", os.path.expanduser("~/.cache/strawberry/wake/stop"))

SAYINGS = ["stop", "stop", "Stop!", "stop.", "Stop.", "stop!", "stop it", "okay, stop",
           "please stop", "oh stop", "stop, stop", "no, stop"]
# Shares sounds with "stop", or is what the ring says.
CONFUSABLES = [
    "top", "shop", "stock", "stuck", "step", "stomp", "spot", "pop", "star", "start",
    "store", "stuff", "time", "timer", "done", "hot", "Scott", "not", "got", "stay",
    "stove", "staff", "stamp", "snap", "drop", "chop", "hop", "mop", "sob", "stub", "top up",
    "on top", "it's time", "the top shelf", "a star", "what's up", "okay", "oh no",
    "hey strawberry", "tea", "stops", "stark", "Tom", "shot", "spot on", "is it done",
    "thanks", "all right", "got it", "yes", "later", "snooze",
]
RING_THINGS = ["tea", "pasta", "egg", "oven", "pizza", "bread", "laundry", "rice",
               "ten minute", "kitchen", "cake", "potato", "parking", "workout", "bath"]
RING_LINES = [f"Your {t} timer is done." for t in RING_THINGS] + [
    "Your timer is done.", "Time to take the bins out.", "Time to water the plants.",
    "Reminder: call the dentist.", "Your alarm for seven is ringing.",
]
COUNTS = {"train": {"stop": 3000, "confusable": 2000, "ring": 800},
          "dev": {"stop": 300, "confusable": 200, "ring": 100}}
CLIP = gen.CLIP
SHARDS = {"train": int(os.environ.get("STOP_TRAIN_SHARDS", "80")),
          "dev": int(os.environ.get("STOP_DEV_SHARDS", "10"))}
SAYS_STOP = re.compile(r"\bstop", re.IGNORECASE)


def tts_job(job):
    split, kind, i = job
    path = os.path.join(STOP_CACHE, "tts", split, kind, f"{i:05d}.npy")
    if os.path.exists(path):
        return
    rng = np.random.default_rng((["train", "dev"].index(split) * 10 + list(COUNTS[split]).index(kind))
                                * 1_000_003 + i + 77)
    engine, voice, variant = gen.pick_voice(rng, gen.voices_of(split))
    speed, pitch = rng.random(), rng.random()
    pool = {"stop": SAYINGS, "confusable": CONFUSABLES, "ring": RING_LINES}[kind]
    text = pool[rng.integers(len(pool))]
    try:
        x = gen.trim(gen.synth(engine, voice, variant, text, speed, pitch))
    except Exception as e:  # one voice failing must not stop the rest
        print(f"skip {engine} {voice}+{variant}: {e!r:.200}", flush=True)
        x = np.zeros(0, np.float32)
    gen.atomic_save_npy(path, x.astype(np.float32))
    with open(path[:-4] + ".json", "w") as f:
        json.dump({"engine": engine, "voice": voice, "variant": variant, "text": text}, f)


def stage_tts(workers):
    jobs = [(s, k, i) for s, kinds in COUNTS.items() for k, n in kinds.items() for i in range(n)]
    np.random.default_rng(0).shuffle(jobs)
    with Pool(workers) as pool:
        for n, _ in enumerate(pool.imap_unordered(tts_job, [tuple(j) for j in jobs], chunksize=8)):
            if n % 1000 == 0:
                print(f"tts {n}/{len(jobs)}", flush=True)


def load(split, kind):
    return gen.load_kind(split, kind, root=STOP_CACHE)


def quiet_of_stop(items):
    return [(x, m) for x, m in items if not SAYS_STOP.search(m["text"])]


_DATA = {}


def data(split):
    if split not in _DATA:
        _DATA[split] = {
            "stop": load(split, "stop"), "confusable": load(split, "confusable"),
            "ring": load(split, "ring"),
            # The wake word's utterances: ordinary speech, its phrase, commands and
            # confusables, none that says "stop".
            "para": quiet_of_stop(gen.load_kind(split, "para", 0, 500)),
            "other": quiet_of_stop(gen.load_kind(split, "phrase") + gen.load_kind(split, "command")
                                   + gen.load_kind(split, "confusable")),
        }
    return _DATA[split]


def beeps(rng):
    """The ring cue (src/audio/cues.rs: three pairs of 80 ms tones), at a random pitch
    in case another sound is used."""
    f = 1320.0 * rng.uniform(0.8, 1.25)
    t = np.arange(int(0.08 * SR)) / SR
    tone = np.sin(2 * np.pi * f * t) * np.minimum(1, np.minimum(t, t[::-1]) / 0.005)
    pair = np.concatenate([tone, np.zeros(int(0.04 * SR)), tone])
    gap = np.zeros(int(0.25 * SR))
    return np.concatenate([pair, gap, pair, gap, pair]).astype(np.float32)


def ring_residual(rng, n, d):
    """What the echo canceller leaves of a ring: beeps and a timer's line, through a
    room, band-limited and uneven (a filter still learning lets parts through)."""
    y = np.zeros(n, np.float32)
    t = int(rng.integers(-int(1.5 * SR), int(0.5 * SR)))
    while t < n:
        for part in (beeps(rng), d["ring"][rng.integers(len(d["ring"]))][0]):
            part = part * rng.uniform(0.3, 1.0)
            a, b = max(0, t), min(n, t + len(part))
            if b > a:
                y[a:b] += part[a - t:b - t]
            t += len(part) + int(SR * rng.uniform(0.05, 0.4))
        t += int(SR * rng.uniform(0.5, 2.0))
    y = fftconvolve(y, gen.room_ir(rng))[:n].astype(np.float32)
    env = np.interp(np.arange(n), np.linspace(0, n, 6), rng.uniform(0.2, 1.0, 6))
    return (y * env / (gen.rms_active(y) + 1e-9)).astype(np.float32)


def make_positive(rng, d):
    x = d["stop"][rng.integers(len(d["stop"]))][0]
    pre = np.zeros(int(SR * rng.uniform(0.2, 1.5)), np.float32)
    if rng.random() < 0.25:  # something said just before
        src = d["other"] if rng.random() < 0.5 else d["para"]
        p = src[rng.integers(len(src))][0]
        pre = np.concatenate([gen.crop_or_loop(p, int(SR * rng.uniform(0.3, 1.2)), rng), pre])
    y = np.concatenate([pre, x, np.zeros(int(0.8 * SR), np.float32)])
    return gen.warp_and_place(y, len(pre) + len(x), rng)


def make_negative(rng, d):
    r = rng.random()
    if r < 0.35:
        y = gen.crop_or_loop(d["para"][rng.integers(len(d["para"]))][0], CLIP, rng)
    elif r < 0.75:
        src = d["confusable"] if rng.random() < 0.6 else (d["ring"] if rng.random() < 0.4 else d["other"])
        c = src[rng.integers(len(src))][0]
        if rng.random() < 0.2:  # a "stop" cut short: "st", "sto"
            s = d["stop"][rng.integers(len(d["stop"]))][0]
            c = s[: int(len(s) * rng.uniform(0.2, 0.45))]
        pre = np.zeros(int(SR * rng.uniform(0.2, 1.8)), np.float32)
        y = np.concatenate([pre, c, np.zeros(CLIP, np.float32)])[:CLIP]
    else:
        y = np.zeros(CLIP, np.float32)
    if rng.random() < 0.5:
        y, _ = gen.sox_warp(y, rng)
    return np.pad(y, (0, max(0, CLIP - len(y))))[:CLIP]


def over_ring(y, rng, d, always=False):
    """Adds a ring's residual at -6 to 25 dB under the speech (or alone)."""
    if not always and rng.random() >= 0.5:
        return y
    r = ring_residual(rng, len(y), d)
    level = gen.rms_active(y) if np.abs(y).max() > 1e-4 else 0.1
    return y + r * level / 10 ** (rng.uniform(-6, 25) / 20)


def shard_job(job):
    split, k = job
    path = os.path.join(STOP_CACHE, "feat", f"{split}-{k:03d}.npz")
    if os.path.exists(path):
        return
    d = data(split)
    rng = np.random.default_rng(5_000_000 + k + (0 if split == "train" else 500_000))
    X, Y = [], []
    for i in range(gen.SHARD):
        if i % 3 == 0:
            y, end = make_positive(rng, d)
            y = over_ring(y, rng, d)
            label = int(round(end / HOP))
        else:
            y = make_negative(rng, d)
            # A quarter of negatives are the ring's residual alone or over speech: what
            # the spotter hears most while it listens.
            y = over_ring(y, rng, d, always=rng.random() < 0.25)
            label = -1
        y = gen.room(y, rng, d["para"])
        X.append(common.features(y).astype(np.float16))
        Y.append(label)
    gen.save_shard(path, X, Y)


def stage_feat(workers):
    os.makedirs(os.path.join(STOP_CACHE, "feat"), exist_ok=True)
    jobs = [("dev", k) for k in range(SHARDS["dev"])] + [("train", k) for k in range(SHARDS["train"])]
    with Pool(workers) as pool:
        list(pool.imap_unordered(shard_job, jobs))


# Points: false stops per hour of the wake word's two dev hours of ordinary speech, TV
# and noise (every stretch of it heard as if said over a ring). The spotter listens
# only while a timer rings, and counts only speech as loud as the last person who spoke
# to the spoke, so `medium` may cost more than the wake word's (none in 10 h): a false
# stop ends a ring someone near it is talking over. The dev clips' negatives (a quarter
# of them single words that share sounds with "stop", far denser than speech) are
# reported beside, not chosen on.
TARGETS = {"low": 0.5, "medium": 2.0, "high": 5.0}
RULES = (1, 2, 3, 4, 6, 8, 10, 12, 16)


def run_together(pieces):
    """One sequence, each piece after enough silence to re-arm, so a run cannot span two."""
    gap = np.zeros(calibrate.REARM + 1, np.float32)
    return np.concatenate([np.concatenate([s, gap]) for s in pieces])


def calibrate_model(src, dst):
    h, a = calibrate.read_model(src)
    X, Y = [], []
    for f in sorted(glob.glob(os.path.join(STOP_CACHE, "feat", "dev-*.npz"))):
        z = np.load(f)
        X.append(z["x"])
        Y.append(z["y"])
    X, Y = np.concatenate(X).astype(np.float32), np.concatenate(Y)
    shrink = 2 + 2 * sum(h["dilations"])
    pad = np.repeat(a["mean"][None, :], shrink, axis=0).astype(np.float32)
    clip_scores = [1 / (1 + np.exp(-calibrate.logits(h, a, np.concatenate([pad, x])))) for x in X]
    speech = [calibrate.scores_of(h, a, x) for _, x, _ in
              calibrate.load_wavs(os.path.join(common.CACHE, "eval-dev", "negative"))]
    if not speech:
        sys.exit(f"no dev negatives in {common.CACHE}/eval-dev: run gen.py eval-dev first")
    hours = sum(len(s) for s in speech) * HOP / SR / 3600
    speech = run_together(speech)
    clip_negs = [s for s, y in zip(clip_scores, Y) if y < 0]
    clip_hours = sum(len(s) for s in clip_negs) * HOP / SR / 3600
    clip_negs = run_together(clip_negs)
    best = {}
    for k in RULES:
        for th in calibrate.THRESHOLDS:
            false = len(calibrate.events(speech, th, k)) / hours
            fired = []
            for s, y in zip(clip_scores, Y):
                if y >= 0:
                    ev = [f for _, f in calibrate.events(s, th, k) if -30 <= f - y <= 60]
                    fired.append(ev[0] - y if ev else None)
            recall = float(np.mean([f is not None for f in fired]))
            for name, target in TARGETS.items():
                if false <= target and recall > best.get((name, k), (0,))[0]:
                    lat = [f for f in fired if f is not None]
                    best[(name, k)] = (recall, float(th), false,
                                       len(calibrate.events(clip_negs, th, k)) / clip_hours,
                                       float(np.median(lat)) if lat else 0.0)
    for (name, k), v in sorted(best.items()):
        print(f"{name} min_frames {k}: recall {v[0]:.3f} threshold {v[1]:.4f} false {v[2]:.2f}/h "
              f"of speech, {v[3]:.1f}/h of dev clips; fired {v[4] * 10:.0f} ms after the word",
              flush=True)
    # The rule that hears most at medium; of those within a point, the shortest.
    med = {k: v for (name, k), v in best.items()
           if name == "medium" and all((n, k) in best for n in TARGETS)}
    if not med:
        sys.exit("no rule reaches every point's false-stop target at any threshold")
    top = max(v[0] for v in med.values())
    k = min(kk for kk, v in med.items() if v[0] >= top - 0.01)
    pts = {name: best[(name, k)] for name in TARGETS}
    h["name"] = "stop"
    h["min_frames"] = k
    h["operating_points"] = {name: round(v[1], 5) for name, v in pts.items()}
    h["end_offset_ms"] = int(round(pts["medium"][4] * HOP * 1000 / SR))
    h["phrase_ms"] = int(round(float(np.median([len(x) for x, _ in data("train")["stop"]])) * 1000 / SR))
    h["calibration"] = {
        "model": os.path.basename(src), "dev_speech_hours": round(hours, 2),
        "dev_clip_hours": round(clip_hours, 2), "dev_positives": int((Y >= 0).sum()),
        "points": {name: {"threshold": round(v[1], 5), "recall": round(v[0], 3),
                          "false_stops_per_hour_of_speech": round(v[2], 3),
                          "false_stops_per_hour_of_dev_clips": round(v[3], 2)}
                   for name, v in pts.items()},
    }
    calibrate.write_model(dst, h, a)
    print(json.dumps(h["calibration"], indent=1))
    print(f"wrote {dst}: min_frames {k}, points {h['operating_points']}")


# Held-out speech that never says "stop", for the false-stop rate (`stop.py eval`): the
# wake word's held-out and dev negatives read text that says it ("stops", "stopped",
# StopIteration) in 0.4% (held out) and 1% (dev) of sentences, a few times an hour of
# speech, about as often as the word fired there, so a detection there may be a true stop.
# Here the wake word's held-out voices (gen.test_voices) read its held-out text with every
# sentence containing "stop" anywhere left out, in 5-minute files, the last of every four
# over music (a TV); each voice reads four files in a row, so every voice is heard over
# music too.
_HELD_OUT = []


def held_out_sentences():
    if not _HELD_OUT:
        _HELD_OUT.extend(t for t in texts.test_sentences() + texts.more_test_sentences()
                         if "stop" not in t.lower())
    return _HELD_OUT


def eval_job(i):
    kind = "tv" if i % 4 == 3 else "speech"
    path = os.path.join(STOP_CACHE, "eval", "negative", f"{kind}-{i:03d}.wav")
    if os.path.exists(path):
        return
    rng = np.random.default_rng(66_000 + i)
    voices = gen.test_voices()
    x = np.concatenate(gen.read_on(voices[i // 4 % len(voices)], held_out_sentences(), rng, 300))
    x = x[: 300 * SR]
    x = x / (np.abs(x).max() + 1e-9) * 0.5
    if kind == "tv":
        x = gen.over_music(x, rng)
    gen.write_wav(path, x / (np.abs(x).max() + 1e-9) * 0.5)


def stage_eval(workers):
    """STOP_EVAL_HOURS (default 10) of eval_job's files."""
    os.makedirs(os.path.join(STOP_CACHE, "eval", "negative"), exist_ok=True)
    n = int(np.ceil(float(os.environ.get("STOP_EVAL_HOURS", "10")) * 12))
    with Pool(workers) as pool:
        for k, _ in enumerate(pool.imap_unordered(eval_job, range(n))):
            if k % 20 == 0:
                print(f"eval {k}/{n}", flush=True)


if __name__ == "__main__":
    workers = int(os.environ.get("WAKE_WORKERS", "2"))
    stage = sys.argv[1] if len(sys.argv) > 1 else ""
    common.usage(__doc__, len(sys.argv) == {"tts": 2, "feat": 2, "calibrate": 4,
                                            "eval": 2}.get(stage))
    if stage == "tts":
        stage_tts(workers)
    elif stage == "eval":
        stage_eval(workers)
    elif stage == "feat":
        stage_feat(workers)
    elif stage == "calibrate":
        calibrate_model(sys.argv[2], sys.argv[3])
