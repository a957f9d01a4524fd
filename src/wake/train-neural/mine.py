"""Hard negatives: runs the trained model over hours of new ordinary speech from the
training voices (paragraphs 500 and up of gen.py's tts stage, never used for training
clips) in rooms with noise and music, and keeps every stretch that scored high as a
negative training clip (CACHE/feat/mine-NNN.npz), plus a sample of ordinary stretches.
train.py's fine-tuning round (WAKE_ROUND=1) trains on them with the first round's
clips. Only training voices and training text are used: the dev and test splits stay
unseen.

Usage: mine.py (after train.py); WAKE_PARAS sets how many paragraphs exist (gen.py).
A later round: mine.py ROUND MODEL.wake [FIRST] mines with that model, in other rooms
(the seed depends on ROUND; round 5 in no room at all), into CACHE/feat/mineROUND-NNN.npz,
from paragraph FIRST on (default 500; a larger one mines only paragraphs the earlier rounds
never heard). Round 10 mines the made-up espeak-ng speakers' paragraphs instead (gen.py
made, with WAKE_MADE_PARAS of them; FIRST defaults to 0), in no room, every other stream
over music: no round had mined speakers espeak-ng does not ship, and over music they make
the bundled word's main network fire far more than dry.
"""

import os
import sys

import numpy as np

import common
from common import CACHE, SR
import gen
import train

GROUP = 10  # paragraphs per stream (about 5 minutes)
MADE = 10  # the round that mines the made-up speakers
PEAK = 0.3  # scores at least this high are kept
CLIP_FRAMES = 238


def params():
    d = np.load(os.path.join(CACHE, "train", f"state-c{train.C}.npz"))
    return {k[2:]: d[k] for k in d.files if k.startswith("p_")}


def norm():
    X, _ = train.load("train")
    sample = X[:: max(1, len(X) // 4000)].astype(np.float32).reshape(-1, common.NMELS)
    return sample.mean(axis=0).astype(np.float32), (sample.std(axis=0) + 1e-3).astype(np.float32)


def forward(p, x):
    h = np.maximum(x[:-2] @ p["w0"][0] + x[1:-1] @ p["w0"][1] + x[2:] @ p["w0"][2] + p["b0"], 0)
    for i, d in enumerate(train.DILATIONS):
        w = p[f"dw{i}"]
        z = h[: -2 * d] * w[0] + h[d:-d] * w[1] + h[2 * d:] * w[2] + p[f"db{i}"]
        h = np.maximum(h[2 * d:] + np.maximum(z, 0) @ p[f"pw{i}"] + p[f"pb{i}"], 0)
    return 1 / (1 + np.exp(-(h @ p["wh"] + p["bh"][0])))


def main():
    if len(sys.argv) > 2:
        import calibrate
        rnd = int(sys.argv[1])
        h, p = calibrate.read_model(sys.argv[2])
        mean, std, running = p["mean"], p["std"], h.get("running_mean")
        prefix = f"mine{rnd}"
    else:
        rnd, p = 1, params()
        (mean, std), running = norm(), None
        prefix = "mine"
    # Paragraphs under 500 of the training voices made training clips; the made-up
    # speakers' paragraphs made none a mined round trains with.
    split, base = ("made", 0) if rnd == MADE else ("train", 500)
    first = int(sys.argv[3]) if len(sys.argv) > 3 else base
    paras = gen.load_kind(split, "para", first)
    babble_src = gen.load_kind("train", "para", 0, 500)
    print(f"mining {len(paras)} paragraphs", flush=True)
    os.makedirs(os.path.join(CACHE, "feat"), exist_ok=True)
    for g in range(0, len(paras), GROUP):
        path = os.path.join(CACHE, "feat", f"{prefix}-{(first - base + g) // GROUP:03d}.npz")
        if os.path.exists(path):
            continue
        rng = np.random.default_rng(9_000 + first - base + g + (rnd - 1) * 1_000_000)
        parts = []
        for x, _ in paras[g:g + GROUP]:
            parts += [x, np.zeros(int(SR * rng.uniform(0.1, 1.5)), np.float32)]
        x = np.concatenate(parts)
        # Round 5 mines speech in no room (gen.room's "dry"); the earlier rounds mined in rooms.
        x = gen.room(x, rng, babble_src, "dry" if rnd in (5, MADE) else "")
        if rnd == MADE and (g // GROUP) % 2:
            x = gen.over_music(x, rng)
        f = common.features(x)
        xn = common.normalise(f, mean, std, running)
        s = forward(p, xn)  # s[j] belongs to feature frame j + SHRINK
        keep = []
        j = 0
        order = np.argsort(-s)
        taken = np.zeros(len(s), bool)
        for j in order:
            if s[j] < PEAK:
                break
            if taken[max(0, j - 50): j + 50].any():
                continue
            taken[j] = True
            t = j + train.SHRINK
            lo = t - 200
            if lo >= 0 and lo + CLIP_FRAMES <= len(f):
                keep.append(lo)
        hard = len(keep)
        # And ordinary stretches, so the round does not forget what ordinary speech is.
        for _ in range(max(8, hard // 2)):
            keep.append(int(rng.integers(0, len(f) - CLIP_FRAMES)))
        X = np.stack([f[lo:lo + CLIP_FRAMES] for lo in keep]).astype(np.float16)
        tmp = path + ".tmp.npz"
        np.savez(tmp, x=X, y=np.full(len(keep), -1, np.int32))
        os.replace(tmp, path)
        print(f"{path}: {len(x) / SR / 60:.1f} min, {hard} hard, best {s.max():.3f}", flush=True)


if __name__ == "__main__":
    common.usage(__doc__, len(sys.argv) == 1 or (len(sys.argv) in (3, 4) and sys.argv[1].isdigit()
                                               and (len(sys.argv) == 3 or sys.argv[3].isdigit())))
    main()
