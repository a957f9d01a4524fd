"""Measures trained models' operating points on the dev split only (dev voices' phrases
in four rooms, with flite's training voices and festival's other-language voices for
other engines' timing, and two hours, or more with gen.py's WAKE_DEV_NEG_HOURS, of dev
voices reading training text, alone, over music and noise; with
WAKE_DEV_NEGATIVES=negative,voices also every dev voice reading text no split reads
otherwise, gen.py eval-dev-voices), picks the model and the
detection rule that hear the most dev phrases at the medium point (espeak's, flite's and
festival's groups counting alike; of rules within a point of the best, the shortest),
writes them into the model file with the
timing figures the detector needs, and exports the exactness check (a fixed clip's
features and logits) for tests/wake.rs.

Usage: calibrate.py OUT.wake CHECK MODEL.wake [MODEL.wake ...]
       calibrate.py --companion OUT.wake MAIN.wake CANDIDATE.wake [CANDIDATE.wake ...]
         (a calibrated word with a companion network: the candidate, a model file of an
         earlier round, and rule that hear the most dev phrases the main network misses
         at its medium point without a false wake more than the point allows, or than the
         main network makes where its points were set on fewer dev hours; then, at
         medium and high, the agreement rule of the two that hears the most dev phrases
         within the point's false wakes, if one hears more than the pair alone)
       calibrate.py --another OUT.wake WORD.wake CANDIDATE.wake [CANDIDATE.wake ...]
         (as --companion, keeping WORD's companions, rules and agreements: one more
         network, within the word's size limit and src/wake/neural.rs's 4 networks; of
         several candidates, the one whose word hears most at medium with its agreement)
       calibrate.py --half MODEL.wake OUT.wake (a model file's network in half floats,
         for a candidate companion: half the bytes)
       calibrate.py --first N WORD.wake OUT.wake (a word's first N networks, its rules and
         agreements: the word --another adds to when its last network is replaced)
       calibrate.py --network K WORD.wake OUT.wake (a word's K-th network alone, K = 1 the
         main one, stored as in the word: what a round fine-tunes or mines with)
       calibrate.py --measure MODEL.wake ... (measures now; a later run reuses it)
       calibrate.py --check WORD.wake CHECK (the exactness check of every network of a
         finished word, each alone: tests/wake.rs runs each and compares)
       calibrate.py --gaps MODEL.wake (what a calibrated word's points cost and hear when
         runs go on through short dips, as they do over the echo canceller's output)
       calibrate.py --fusion WORD.wake (what the word's networks would hear at the medium
         point with their scores fused into one under one rule, against its own rules)
The detection rule simulated here is src/wake/neural.rs's: `min_frames` consecutive
frames at or over the threshold fire; the word re-arms after 50 frames under it.
"""

import glob
import hashlib
import json
import os
import pickle
import struct
import sys

import numpy as np
from scipy.io import wavfile

import common
from common import CACHE, HOP, WIN, SR

REARM = 50
# Persistence rules tried (consecutive frames over the threshold); a phrase keeps its
# score up for ~20 frames after it ends (~40 from round 4's labels on), a stray spike in
# ordinary speech for fewer. At most 32 (320 ms): over the spoke's own reply the echo
# canceller's suppressor dips the score, and a longer run breaks more often (round 7's
# word at 40 frames interrupted a reply 7 times in 10 in tests/voice_echo.rs, at 24
# frames 9 or 10); and every frame of the rule is a frame the person waits.
RULES = (2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 28, 32)
# Rules whose dev detection is within this of the best are tied: the shortest wins, as
# a voice whose score falls sooner than the dev voices' still fires with it.
TIE = 0.01
# A word with companion networks stays under this (issue 25: a bundled model well under
# 1 MB); round 8's network is 475 kB, a 64-channel one 140 kB (in half floats, 70 kB).
MAX_WORD_BYTES = 2 * 1024 * 1024 // 3
# How a file's arrays are stored (its header's `dtype`): half floats halve a network;
# its scores are measured with its weights so rounded, as src/wake/neural.rs widens them.
DTYPES = {"f32": "<f4", "f16": "<f2"}
# Networks in one word (src/wake/neural.rs's MAX_NETWORKS).
MAX_NETWORKS = 4
# Dev phrase groups, by file name: the espeak dev voices, flite's training voices
# (common.DEV_FLITE) and festival's other-language voices (common.DEV_FESTIVAL).
GROUPS = ("espeak", "flite", "festival")
# Thresholds tried, even in logit space (scores crowd near 1).
THRESHOLDS = 1 / (1 + np.exp(-np.arange(-1.0, 10.0, 0.125)))
# A companion's agreement with the main network (src/wake/neural.rs): the main network's
# run of AGREE_RULES frames over a threshold under its own point's, from 0.5 up, fires the
# word when the companion was over its threshold (AGREE_THRESHOLDS) for AGREE_FRAMES of
# the last AGREE_WINDOW frames (1 s, the current one included).
AGREE_WINDOW = 100
AGREE_RULES = (8, 12, 16, 20, 24)
AGREE_FRAMES = (1, 3, 6, 12)
AGREE_THRESHOLDS = 1 / (1 + np.exp(-np.arange(2.0, 7.01, 0.5)))


def read_model(path):
    """A model file's header and arrays (of a word with companions: its main network's)."""
    return parse_network(open(path, "rb").read())[:2]


def read_word(path):
    """Every network of a word file, the main one first: (header, arrays) each."""
    h, a, rest = parse_network(open(path, "rb").read())
    out = [(h, a)]
    while out[-1][0].get("companion_bytes"):
        h, a, rest = parse_network(rest)
        out.append((h, a))
    return out


def parse_network(b):
    """The header and arrays (as f32) of the network `b` starts with, and the bytes after
    its arrays."""
    if b[:8] != b"SSWAKENN":
        sys.exit("not a neural wake word file (no SSWAKENN at the start of a network)")
    n = struct.unpack("<I", b[8:12])[0]
    h = json.loads(b[12:12 + n])
    if h.get("dtype", "f32") not in DTYPES:
        sys.exit(f"a network stored as {h['dtype']!r}: this script reads {' and '.join(DTYPES)}")
    dt = np.dtype(DTYPES[h.get("dtype", "f32")])
    off = 12 + n
    arrays = {}
    for name, shape in h["arrays"]:
        k = int(np.prod(shape))
        arrays[name] = np.frombuffer(b[off:off + dt.itemsize * k], dt).astype(np.float32).reshape(shape)
        off += dt.itemsize * k
    return h, arrays, b[off:]


def model_bytes(h, arrays):
    hb = json.dumps(h, indent=1).encode()
    dt = DTYPES[h.get("dtype", "f32")]
    return b"SSWAKENN" + struct.pack("<I", len(hb)) + hb + b"".join(
        np.ascontiguousarray(arrays[name], dt).tobytes() for name, _ in h["arrays"])


def chain(networks):
    """Networks (header, arrays) as one file's bytes, each announcing the next's length."""
    out = b""
    for h, a in reversed(networks):
        h = dict(h, companion_bytes=len(out)) if out else {k: v for k, v in h.items()
                                                             if k != "companion_bytes"}
        out = model_bytes(h, a) + out
    return out


def write_model(path, h, arrays, companion=b""):
    """Writes a network (and the companion network's file after it, if any) atomically."""
    if companion:
        h = dict(h, companion_bytes=len(companion))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(model_bytes(h, arrays) + companion)
    os.replace(tmp, path)


def logits(h, a, feats):
    """The network over whole feature sequences [T, n_mels] (valid convolutions)."""
    x = common.normalise(feats, a["mean"], a["std"], h.get("running_mean"))
    w0 = a["w0"]
    y = x[:-2] @ w0[0] + x[1:-1] @ w0[1] + x[2:] @ w0[2] + a["b0"]
    y = np.maximum(y, 0)
    for i, d in enumerate(h["dilations"]):
        w = a[f"dw{i}"]
        z = y[:-2 * d] * w[0] + y[d:-d] * w[1] + y[2 * d:] * w[2] + a[f"db{i}"]
        z = np.maximum(z, 0) @ a[f"pw{i}"] + a[f"pb{i}"]
        y = np.maximum(y[2 * d:] + z, 0)
    return y @ a["wh"] + a["bh"][0]


def scores_of(h, a, x):
    """Scores per frame of a clip, aligned so score[t] belongs to feature frame t
    (frames before the receptive field is full come out as 0)."""
    f = common.features(x)
    shrink = 2 + 2 * sum(h["dilations"])
    # Streaming starts from silence-like history: pad with the normalised mean.
    pad = np.repeat(a["mean"][None, :], shrink, axis=0)
    s = 1 / (1 + np.exp(-logits(h, a, np.concatenate([pad, f]).astype(np.float32))))
    return s


def events(s, th, k, gap=0):
    """(first frame of the run, frame it fired at) for each detection: `k` frames at or
    over `th` in a run fire, then `REARM` frames under it re-arm. A run goes on through
    dips under `th` of at most `gap` frames, counted in it (the detector's rule over the
    echo canceller's output; 0 elsewhere)."""
    over = s >= th
    if not over.any():
        return []
    d = np.diff(np.concatenate([[0], over.astype(np.int8), [0]]))
    starts, ends = np.nonzero(d == 1)[0], np.nonzero(d == -1)[0]
    if gap:
        # Runs apart by a dip of at most `gap` frames are one run.
        first = np.concatenate([[True], starts[1:] - ends[:-1] > gap])
        last = np.concatenate([first[1:], [True]])
        starts, ends = starts[first], ends[last]
    out = []
    disarmed_until_gap = False
    last_end = 0
    for a, b in zip(starts, ends):
        if disarmed_until_gap:
            if a - last_end >= REARM:
                disarmed_until_gap = False
            else:
                last_end = b
                continue
        if b - a >= k:
            out.append((int(a), int(a + k - 1)))
            disarmed_until_gap, last_end = True, b
    return out


def wavs_in(d):
    """A directory's recordings, without the temporary files of a write cut short."""
    return sorted(p for p in glob.glob(os.path.join(d, "*.wav")) if not p.endswith(".tmp.wav"))


def load_wavs(d):
    out = []
    for p in wavs_in(d):
        rate, x = wavfile.read(p)
        x = x.astype(np.float32) / 32768.0
        end = None
        t = p[:-4] + ".txt"
        if os.path.exists(t):
            end = float(open(t).read())
        out.append((p, x, end))
    return out


def _cached(key, name, compute):
    path = os.path.join(CACHE, "calibrate", f"{key}-{name}.pkl")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    out = compute()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        pickle.dump(out, f)
    os.replace(path + ".tmp", path)
    return out


def measure_model(path):
    """Every rule's table of (threshold, false wakes per hour, detection per room,
    offsets, dev clips fired) on the dev recordings, the hours of negatives and clips,
    and the number of phrases. Scores and tables are cached per network and dev set,
    so candidates can be measured as training writes them."""
    h, a = read_model(path)
    key, (pos, negs, clips) = network_scores(h, a)
    hours = sum(len(s) for s in negs) * HOP / SR / 3600
    clip_hours = len(clips) * 2.4 / 3600
    rule = hashlib.sha1(repr((THRESHOLDS.tolist(), REARM, GROUPS)).encode()).hexdigest()[:8]
    tables = {k: _cached(key, f"rule{k}-{rule}", lambda: rule_table(pos, negs, clips, hours, k))
              for k in RULES}
    return h, a, tables, hours, clip_hours, len(pos)


# The dev set's directories of negatives: "negative" (gen.py eval-dev), and with
# WAKE_DEV_NEGATIVES=negative,voices also every dev voice reading text of its own (gen.py
# eval-dev-voices). A word calibrated on one set is rebuilt byte for byte on that set.
DEV_NEGATIVES = [d.strip() for d in os.environ.get("WAKE_DEV_NEGATIVES", "negative").split(",")]
DEV_ROOMS = ("quiet", "reverb", "noise10", "babble5")


def network_scores(h, a):
    """The cache key of the network (header h, arrays a) on this dev set, and its dev
    scores. The key is the network's weights (as stored), its dilations, its running mean's
    weight if it has one, and the dev files measured: not the rest of its header (points,
    rules, the word it is in), so a network scored once as a candidate keeps its scores in
    every word it is then kept in."""
    dev = os.path.join(CACHE, "eval-dev")
    for d in DEV_NEGATIVES:
        # Checked before the cache key: a missing set would key the scores of the others.
        if not wavs_in(os.path.join(dev, d)):
            sys.exit(f"no dev negatives in {os.path.join(dev, d)} (WAKE_DEV_NEGATIVES names "
                     f"{d!r}): gen.py eval-dev writes \"negative\", gen.py eval-dev-voices "
                     "\"voices\"")
    dev_files = sorted(p for d in DEV_ROOMS + tuple(DEV_NEGATIVES)
                       for p in wavs_in(os.path.join(dev, d)))
    # A running mean's weight keys the scores too (absent, the keys of before it).
    running = {"running_mean": h["running_mean"]} if "running_mean" in h else {}
    b = model_bytes({"dilations": h["dilations"], "dtype": h.get("dtype", "f32"),
                     "arrays": h["arrays"], **running}, a)
    key = hashlib.sha1(b + repr(dev_files).encode()).hexdigest()[:16]
    return key, _cached(key, "scores", lambda: dev_scores(h, a))


def dev_scores(h, a):
    """Scores of the dev phrases (room, group, scores, true phrase end), of the dev negatives,
    and of the dev clips' negatives (2.4 s each, a third of them confusable phrases:
    "hey strawberries", "say strawberry"; for the low point)."""
    dev = os.path.join(CACHE, "eval-dev")
    shards = sorted(glob.glob(os.path.join(CACHE, "feat", "dev-*.npz")))
    if not shards:
        sys.exit(f"calibrate.py: no dev clips in {CACHE}/feat (dev-*.npz), which the low point "
                 "is set on: run `python3 gen.py tts` and `python3 gen.py feat` first")
    pos = []
    for cond in DEV_ROOMS:
        pos += [(cond, group_of(p), scores_of(h, a, x), e)
                for p, x, e in load_wavs(os.path.join(dev, cond))]
    negs = [scores_of(h, a, x) for d in DEV_NEGATIVES
            for _, x, _ in load_wavs(os.path.join(dev, d))]
    shrink = 2 + 2 * sum(h["dilations"])
    pad = np.repeat(a["mean"][None, :], shrink, axis=0)
    clips = []
    for f in shards:
        z = np.load(f)
        for feats, y in zip(z["x"], z["y"]):
            if y < 0:
                lg = logits(h, a, np.concatenate([pad, feats.astype(np.float32)]))
                clips.append(1 / (1 + np.exp(-lg)))
    return pos, negs, np.stack(clips)


def group_of(path):
    name = os.path.basename(path)
    return next((g for g in GROUPS[1:] if name.startswith(g + "_")), "espeak")


def heard_at(s, e, th, k, gap=0):
    """How long after the true phrase end `e` (s) a dev phrase's scores `s` fire, or None
    when no detection falls from 0.3 s before it to 1 s after. The time of frame t is its
    window's end, (t*HOP + WIN) / SR."""
    return heard_in([first for first, _ in events(s, th, k, gap)], e)


def heard_in(frames, e):
    """heard_at for detections at these frames."""
    return next((t for t in ((f * HOP + WIN) / SR - e for f in frames) if -0.3 <= t <= 1.0), None)


def clip_runs(clips, k):
    """Per dev clip, its best k-frame run's lowest score: the clip fires (at least once) at
    any threshold up to it."""
    return np.min(np.stack([clips[:, i:clips.shape[1] - k + 1 + i] for i in range(k)]), axis=0).max(axis=1)


def rule_table(pos, negs, clips, hours, k):
    clip_peak = clip_runs(clips, k)
    table = []
    for th in THRESHOLDS:
        fa = sum(len(events(s, th, k)) for s in negs)
        fa_clips = int((clip_peak >= th).sum())
        hits, by_group, offsets = {}, {}, []
        for c, g, s, e in pos:
            offset = heard_at(s, e, th, k)
            hits.setdefault(c, []).append(offset is not None)
            by_group.setdefault(f"{g} {c}", []).append(offset is not None)
            if offset is not None:
                offsets.append(offset)
        table.append((float(th), fa / hours, {c: float(np.mean(v)) for c, v in hits.items()},
                      offsets, fa_clips, {c: float(np.mean(v)) for c, v in by_group.items()}))
    return table


def points(table, hours):
    """The operating points of one rule's table: high, at most one false wake an hour of
    dev speech, music and noise; medium, at most one per 10 of those hours (none in fewer,
    as in the 2 hours the bundled word was calibrated on, where one event sets the point);
    low, none there at all
    and at most half as many of the dev clips (a third of them confusable phrases such as
    "hey strawberries") firing as at medium. Each is the lowest such threshold; when no
    threshold gets there, the highest tried (the header says which were reached)."""
    def lowest(ok):
        rows = [t for t in table if ok(t)]
        return (rows[0], True) if rows else (table[-1], False)
    allowed = allowed_false_wakes(hours)
    medium = lowest(lambda t: round(t[1] * hours) <= allowed)
    return {"high": lowest(lambda t: t[1] <= 1.0),
            "medium": medium,
            "low": lowest(lambda t: t[1] == 0 and t[4] <= medium[0][4] // 2)}


def allowed_false_wakes(hours):
    """False wakes the medium point may make in `hours` of dev negatives: one per ten
    hours. Ten 5-minute files hold 4 s of frames less than their length (the first
    window), so the hours are rounded first."""
    return int(round(hours, 2) / 10)


def fmt(recall):
    return " ".join(f"{c} {100 * v:.0f}%" for c, v in recall.items())


def gaps(path):
    """A calibrated word at its own points and rule, with runs going on through dips of
    0-6 frames: dev false wakes per hour and dev detection per room."""
    h, a = read_model(path)
    _, (pos, negs, _) = network_scores(h, a)
    hours = sum(len(s) for s in negs) * HOP / SR / 3600
    k = h["min_frames"]
    for name, th in h["operating_points"].items():
        for gap in range(7):  # up to the daemon's ECHO_GAP (src/wake/neural.rs)
            fa = sum(len(events(s, th, k, gap)) for s in negs)
            hits = {}
            for c, _, s, e in pos:
                hits.setdefault(c, []).append(heard_at(s, e, th, k, gap) is not None)
            print(f"{name} (threshold {th}, min_frames {k}) gap {gap}: {fa} false wakes in "
                  f"{hours:.2f} h; dev detection {fmt({c: float(np.mean(v)) for c, v in hits.items()})}",
                  flush=True)


def group_score(recall):
    """The mean over dev voice groups of each group's mean detection over rooms (recall
    keyed "GROUP ROOM"): every group counts alike."""
    return float(np.mean([np.mean([v for c, v in recall.items() if c.startswith(g + " ")])
                          for g in GROUPS if any(c.startswith(g + " ") for c in recall)]))


def union_count(lists):
    """Detections of a word whose networks fire at these frames: after one fires, every
    network waits to re-arm (src/wake/neural.rs), taken here as fires within two re-arm
    spans counting once."""
    n, last = 0, None
    for f in sorted(f for frames in lists for f in frames):
        if last is None or f - last > 2 * REARM:
            n, last = n + 1, f
    return n


def union_false_wakes(base, extra):
    """Dev false wakes of a word whose rules fire at `base` and `extra` frames (per
    negative file)."""
    return sum(union_count([b, x]) for b, x in zip(base, extra))


def union_recall(pos, base, extra):
    """Dev detection by "GROUP ROOM" of a word whose rules fire at `base` and `extra`
    frames (per dev phrase; `pos`: the dev phrases' room, group and phrase end)."""
    by_group = {}
    for (c, g, _, e), b, x in zip(pos, base, extra):
        by_group.setdefault(f"{g} {c}", []).append(heard_in(b + x, e) is not None)
    return {c: float(np.mean(v)) for c, v in by_group.items()}


def agreement_events(ms, cs, th, k):
    """The frames a main network's run of `k` over `th` fires its agreement rule at (with
    its re-arming, as events()), each with the companion's n-th highest score in the
    window ending there for each n of AGREE_FRAMES: the rule fires the word there when
    that score is at or over the companion's threshold."""
    out = []
    for _, f in events(ms, th, k):
        w = np.sort(cs[max(0, f - AGREE_WINDOW + 1): f + 1])[::-1]
        out.append((f, [float(w[n - 1]) if len(w) >= n else -1.0 for n in AGREE_FRAMES]))
    return out


def agreement(name, th_main, base_negs, base_pos, mpos, mnegs, cpos, cnegs, ok, hours):
    """The agreement rule that hears the most dev phrases at one point (groups counting
    alike) with the word's detections there (`base_negs`, `base_pos`: their fire frames)
    within the point's false wakes (`ok`), its report and score, or Nones when none hears
    more than the word without it.
    Of rules that hear alike, the first tried: the main network's higher thresholds first,
    then its shorter runs (sooner), then more of the companion's frames and its higher
    thresholds."""
    def judge(nev, pev, j, t2):
        fa = union_false_wakes(base_negs, [[f for f, v in ev if v[j] >= t2] for ev in nev])
        if not ok(fa):
            return None
        recall = union_recall(mpos, base_pos, [[f for f, v in ev if v[j] >= t2] for ev in pev])
        return group_score(recall), fa, recall

    best = judge([[]] * len(base_negs), [[]] * len(base_pos), 0, 1.0) or (-1.0, None, None)
    chosen = None
    for t1 in sorted((t for t in THRESHOLDS if 0.5 <= t < th_main), reverse=True):
        for k1 in AGREE_RULES:
            nev = [agreement_events(m, c, t1, k1) for m, c in zip(mnegs, cnegs)]
            pev = [agreement_events(m[2], c[2], t1, k1) for m, c in zip(mpos, cpos)]
            for j in reversed(range(len(AGREE_FRAMES))):
                for t2 in AGREE_THRESHOLDS[::-1]:
                    r = judge(nev, pev, j, t2)
                    if r is not None and r[0] > best[0] + 1e-9:
                        best = r
                        chosen = {"main": round(float(t1), 5), "main_frames": k1,
                                  "companion": round(float(t2), 5),
                                  "companion_frames": AGREE_FRAMES[j]}
    if chosen is None:
        return None, None, None
    score, fa, by_group = best
    print(f"{name}: agreement {chosen}: {fa} false wakes in {hours:.2f} h, dev detection "
          f"{fmt(by_group)} score {score:.3f}", flush=True)
    return chosen, {"false_wakes_per_hour": round(fa / hours, 3), "score": round(score, 3),
                    "recall_by_voices": {c: round(v, 3) for c, v in by_group.items()}}, score


def network_fires(h, name, s, ms):
    """The frames a companion network (header h, scores s) fires the word at, at one
    point: its own rule's, and its agreement's with the main network's scores `ms`."""
    out = [f for _, f in events(s, h["operating_points"][name], h["min_frames"])]
    ag = (h.get("agreement") or {}).get(name)
    if ag:
        w = h["agreement"]["window_frames"]
        out += [f for _, f in events(ms, ag["main"], ag["main_frames"])
                if (s[max(0, f - w + 1): f + 1] >= ag["companion"]).sum() >= ag["companion_frames"]]
    return out


def lowest_threshold(ok):
    """The index of the lowest of THRESHOLDS where `ok` holds, and whether it holds there
    (the highest tried when it holds nowhere). False wakes fall as the threshold rises, so
    a bisection finds it."""
    lo, hi = 0, len(THRESHOLDS) - 1
    if not ok(hi):
        return hi, False
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo, True


def word_fires(hm, main_scores, kept, kept_scores, name):
    """The frames a word fires at, at one point, on the dev negatives and phrases, and
    which dev clips fire it: its main network (header hm, its dev scores) by its rule, and
    each of its companions (`kept`, their dev scores) by its rule and agreement."""
    mpos, mnegs, mclips = main_scores
    th, km = hm["operating_points"][name], hm["min_frames"]
    negs = [[f for _, f in events(s, th, km)] for s in mnegs]
    pos = [[f for _, f in events(s, th, km)] for _, _, s, _ in mpos]
    clips = clip_runs(mclips, km) >= th
    for (h, _), (kpos, knegs, kclips) in zip(kept, kept_scores):
        negs = [b + network_fires(h, name, s, m) for b, s, m in zip(negs, knegs, mnegs)]
        pos = [b + network_fires(h, name, k[2], m[2]) for b, k, m in zip(pos, kpos, mpos)]
        clips = clips | (clip_runs(kclips, h["min_frames"]) >= h["operating_points"][name])
    return negs, pos, clips


def companion(dst, main_path, candidates, keep=False):
    """Writes MAIN with the companion network chosen among CANDIDATES (model files of
    earlier rounds): each candidate's rule whose union with the main network hears the
    most dev phrases at the medium point (groups counting alike), each point's companion
    threshold the lowest at which the word stays within that point's false wakes (the main
    network's points stay); then each point's agreement with the main network, and the
    candidate whose word hears most at medium with it. The main network's dev misses in a
    quiet room were whole voices whose score stayed up too few frames for its rule; a
    network of another round, with a shorter rule at a high threshold, hears some of them.
    With `keep` (--another), MAIN's companions stay, with their rules and agreements, the
    candidate is added after them, and candidates are compared by what the word hears
    with their agreement (a third network's gain is mostly its agreement); otherwise it
    replaces them and candidates are compared by their own rule, as the bundled pair's
    was chosen."""
    hm, am = read_model(main_path)
    _, (mpos, mnegs, mclips) = network_scores(hm, am)
    hours = sum(len(s) for s in mnegs) * HOP / SR / 3600
    kept = read_word(main_path)[1:] if keep else []
    if len(kept) + 2 > MAX_NETWORKS:
        sys.exit(f"{main_path} holds {len(kept) + 1} networks already: a word holds at most "
                 f"{MAX_NETWORKS} (src/wake/neural.rs)")
    kept_scores = [network_scores(h, a)[1] for h, a in kept]
    main_fires = {name: word_fires(hm, (mpos, mnegs, mclips), kept, kept_scores, name)
                  for name in hm["operating_points"]}
    # A word whose points were set on fewer dev hours may make more false wakes in these
    # than a point allows: it keeps them, and the network added may add none.
    own = {name: union_false_wakes(f[0], [[]] * len(f[0])) for name, f in main_fires.items()}
    targets = {"medium": lambda fa, clips, med: fa <= max(allowed_false_wakes(hours), own["medium"]),
               "high": lambda fa, clips, med: fa <= max(hours, own["high"]),
               "low": lambda fa, clips, med: fa <= own["low"] and clips <= med // 2}

    def pair(name, cpos, cnegs, cruns, th, k):
        negs, pos, clips = main_fires[name]
        fa = union_false_wakes(negs, [[f for _, f in events(s, th, k)] for s in cnegs])
        fired = int((clips | (cruns >= th)).sum())
        return fa, fired, union_recall(cpos, pos, [[f for _, f in events(s, th, k)] for _, _, s, _ in cpos])

    def lowest(name, cpos, cnegs, cruns, k, med_clips):
        return lowest_threshold(lambda i: targets[name](
            *pair(name, cpos, cnegs, cruns, THRESHOLDS[i], k)[:2], med_clips))

    def agree(name, cpos, cnegs, k, th, med_clips):
        # The point's agreement (none at low, whose target also counts the dev clips'
        # confusable phrases) over the word's detections with the candidate's own rule.
        base_negs = [a + [f for _, f in events(s, th, k)] for a, s in zip(main_fires[name][0], cnegs)]
        base_pos = [a + [f for _, f in events(s, th, k)]
                    for a, (_, _, s, _) in zip(main_fires[name][1], cpos)]
        return agreement(name, hm["operating_points"][name], base_negs, base_pos, mpos, mnegs,
                         cpos, cnegs, lambda fa: targets[name](fa, 0, med_clips), hours)

    best = None
    word_size = os.path.getsize(main_path) - (0 if keep else hm.get("companion_bytes", 0))
    for path in candidates:
        size = word_size + os.path.getsize(path)
        if size > MAX_WORD_BYTES:
            print(f"{os.path.basename(path)}: the word would take {size} bytes, more than "
                  f"{MAX_WORD_BYTES}", flush=True)
            continue
        hc, ac = read_model(path)
        if any(same_network(ac, a) for a in [am] + [a for _, a in kept]):
            # Its scores would only repeat those of a network the word holds.
            print(f"{os.path.basename(path)}: the word holds this network already (maybe in "
                  "other floats)", flush=True)
            continue
        _, (cpos, cnegs, cclips) = network_scores(hc, ac)
        mine = None
        for k in RULES:
            cruns = clip_runs(cclips, k)
            i, reached = lowest("medium", cpos, cnegs, cruns, k, 0)
            if not reached:
                continue
            fa, fired, by_group = pair("medium", cpos, cnegs, cruns, THRESHOLDS[i], k)
            score = group_score(by_group)
            print(f"{os.path.basename(path)} min_frames {k}: medium th {THRESHOLDS[i]:.4f} with the "
                  f"word: {fa} false wakes in {hours:.2f} h, dev detection {fmt(by_group)} "
                  f"score {score:.3f}", flush=True)
            if mine is None or score > mine[0]:
                mine = (score, k, cruns, i, fired)
        if mine is None:
            continue
        score, k, cruns, i, fired = mine
        if keep:
            print(f"{os.path.basename(path)}, with its agreement:", flush=True)
            chosen, _, with_it = agree("medium", cpos, cnegs, k, THRESHOLDS[i], fired)
            score = with_it if chosen else score
        if best is None or score > best[0]:
            best = (score, path, hc, ac, k, cpos, cnegs, cruns, i, fired)
    if best is None:
        sys.exit("no candidate stays within the medium point's false wakes")
    _, path, hc, ac, k, cpos, cnegs, cruns, i_med, med_clips = best
    points, report, agreements = {}, {}, {"window_frames": AGREE_WINDOW, "low": None}
    for name in ("medium", "high", "low"):
        i, reached = (i_med, True) if name == "medium" else lowest(name, cpos, cnegs, cruns, k, med_clips)
        fa, fired, by_group = pair(name, cpos, cnegs, cruns, THRESHOLDS[i], k)
        points[name] = round(float(THRESHOLDS[i]), 5)
        report[name] = {"threshold": points[name], "reached": reached,
                        "false_wakes_per_hour": round(fa / hours, 3), "false_wakes_in_clips": fired,
                        "recall_by_voices": {c: round(v, 3) for c, v in by_group.items()}}
        if name != "low":
            agreements[name], report[name]["agreement"], _ = agree(name, cpos, cnegs, k,
                                                                   points[name], med_clips)
    # The companion's own timing: how long after the phrase its score fires at medium.
    offsets = [t for _, _, s, e in cpos
               if (t := heard_at(s, e, points["medium"], k)) is not None] or [0.1]
    hc = dict(hc)
    hc["operating_points"] = {n: points[n] for n in ("low", "medium", "high")}
    hc["min_frames"] = k
    hc["end_offset_ms"] = int(round(max(0.0, float(np.median(offsets))) * 1000))
    hc["phrase_ms"] = hm["phrase_ms"]
    if agreements["medium"] or agreements["high"]:
        hc["agreement"] = agreements
    hc.pop("calibration", None)
    hc["companion_of"] = {"model": os.path.basename(main_path), "candidate": os.path.basename(path),
                          "dev_negative_hours": round(hours, 2), "points": report}
    companions = chain(kept + [(hc, ac)])
    size = len(model_bytes(dict(hm, companion_bytes=len(companions)), am)) + len(companions)
    if size > MAX_WORD_BYTES:
        sys.exit(f"the word would take {size} bytes, more than {MAX_WORD_BYTES}: offer smaller "
                 "candidates (calibrate.py --half halves one)")
    write_model(dst, hm, am, companions)
    print(json.dumps(hc["companion_of"], indent=1))
    print(f"wrote {dst}: companion {os.path.basename(path)} with min_frames {k}, points {points}")


# Ways to make one score per frame of a word's networks' scores (--fusion).
FUSIONS = {
    "the main network alone": lambda s: s[0],
    "mean of logits": lambda s: 1 / (1 + np.exp(-np.mean(np.log(s / (1 - s)), axis=0))),
    "mean": lambda s: np.mean(s, axis=0),
    "highest": lambda s: np.max(s, axis=0),
    "second highest": lambda s: np.sort(s, axis=0)[-2],
}


def fusion(path):
    """What the word's networks hear at the medium point's false wakes with their scores
    fused into one (FUSIONS) under one rule, against the word's own rules and agreements:
    each fusion's best rule of RULES at its lowest threshold within the allowance."""
    nets = read_word(path)
    scores = [network_scores(h, a)[1] for h, a in nets]
    mpos, mnegs, _ = scores[0]
    hours = sum(len(s) for s in mnegs) * HOP / SR / 3600
    allowed = allowed_false_wakes(hours)
    negs, pos, _ = word_fires(nets[0][0], scores[0], nets[1:], scores[1:], "medium")
    recall = union_recall(mpos, pos, [[] for _ in pos])
    print(f"{os.path.basename(path)}, {len(nets)} networks, its own rules at medium: "
          f"{union_false_wakes(negs, [[] for _ in negs])} false wakes in {hours:.2f} h (the "
          f"point allows {allowed}), dev detection {fmt(recall)} score "
          f"{group_score(recall):.3f}", flush=True)

    def stacked(i, of_pos):
        s = np.stack([sc[0][i][2] if of_pos else sc[1][i] for sc in scores])
        return np.clip(s.astype(np.float64), 1e-7, 1 - 1e-7)

    for name, fuse in FUSIONS.items():
        fn = [fuse(stacked(i, False)) for i in range(len(mnegs))]
        fp = [fuse(stacked(i, True)) for i in range(len(mpos))]
        best = None
        for k in RULES:
            fa = lambda i: sum(len(events(s, THRESHOLDS[i], k)) for s in fn)
            lo, reached = lowest_threshold(lambda i: fa(i) <= allowed)
            if not reached:
                continue
            recall = union_recall(mpos, [[f for _, f in events(s, THRESHOLDS[lo], k)] for s in fp],
                                  [[] for _ in fp])
            if best is None or group_score(recall) > best[0] + 1e-9:
                best = (group_score(recall), k, THRESHOLDS[lo], fa(lo), recall)
        if best is None:
            print(f"{name}: no rule within {allowed} false wakes", flush=True)
            continue
        score, k, th, fa_, recall = best
        print(f"{name}: {k} frames over {th:.4f}, {fa_} false wakes, dev detection "
              f"{fmt(recall)} score {score:.3f}", flush=True)


def same_network(a, b):
    """Whether two networks' arrays are one network's, in f32 or rounded to half floats
    (whose rounding moves a weight by at most 2^-11 of it)."""
    return a.keys() == b.keys() and all(
        a[n].shape == b[n].shape and np.allclose(a[n], b[n], rtol=1e-3, atol=1e-6) for n in a)


def half(src, dst):
    """SRC's (main) network stored in half floats, as a candidate companion: its dev
    scores are then measured with its weights so rounded."""
    h, a = read_model(src)
    # Its points and calibration were measured with the f32 weights: a word's file gets
    # new ones from --companion or --another.
    h = {n: v for n, v in h.items() if n not in ("companion_bytes", "calibration")}
    h["dtype"] = "f16"
    for name, v in a.items():
        r = v.astype("<f2")
        if not np.isfinite(r).all() or (name == "std" and (r <= 0).any()):
            sys.exit(f"{src}: array {name} does not fit half floats (values up to "
                     f"{float(np.abs(v).max()):g}; at most 65504, and scales over 0)")
    write_model(dst, h, a)
    print(f"wrote {dst}: {os.path.getsize(dst)} bytes")


def take(kind, n, src, dst):
    """--first and --network: a word's first `n` networks, or its `n`-th alone."""
    nets = read_word(src)
    if not 1 <= n <= len(nets):
        sys.exit(f"{src} holds {len(nets)} networks: ask for 1 to {len(nets)}")
    if kind == "--first":
        (h, a), kept = nets[0], nets[1:n]
        write_model(dst, {k: v for k, v in h.items() if k != "companion_bytes"}, a, chain(kept))
    else:
        h, a = nets[n - 1]
        # A companion's rule and agreement belong to the word it was chosen for.
        write_model(dst, {k: v for k, v in h.items()
                          if k not in ("companion_bytes", "companion_of", "agreement")}, a)
    print(f"wrote {dst}: {os.path.getsize(dst)} bytes")


# Each mode's number of arguments, the mode included: at least, and at most (None: any).
ARGS = {"--first": (4, 4), "--network": (4, 4), "--companion": (4, None),
        "--another": (4, None), "--half": (3, 3), "--gaps": (2, 2), "--fusion": (2, 2),
        "--measure": (2, None), "--check": (3, 3)}


def main():
    args = sys.argv[1:]
    mode = args[0] if args else ""
    lo, hi = ARGS.get(mode, (3, None))
    common.usage(__doc__, lo <= len(args) <= (hi or len(args))
                 and (mode in ARGS or not mode.startswith("-"))
                 and (mode not in ("--first", "--network") or args[1].isdigit()))
    if mode in ("--first", "--network"):
        take(mode, int(args[1]), args[2], args[3])
        return
    if mode in ("--companion", "--another"):
        companion(args[1], args[2], args[3:], keep=mode == "--another")
        return
    if mode == "--half":
        half(args[1], args[2])
        return
    if mode == "--check":
        nets = read_word(args[1])
        export_check(*nets[0], args[2], nets[1:])
        return
    if mode == "--gaps":
        gaps(args[1])
        return
    if mode == "--fusion":
        fusion(args[1])
        return
    if mode == "--measure":  # only fill the cache
        for path in args[1:]:
            measure_model(path)
            print(f"measured {path}", flush=True)
        return
    dst, check, candidates = args[0], args[1], args[2:]
    rows = []
    for path in candidates:
        h, a, tables, hours, clip_hours, n_pos = measure_model(path)
        for k, table in tables.items():
            pts = points(table, hours)
            by_group = pts["medium"][0][5]
            # The few flite and festival voices count as much as the espeak ones.
            score = group_score(by_group) if pts["medium"][1] else -1.0
            print(f"{os.path.basename(path)} min_frames {k}: medium th {pts['medium'][0][0]:.4f} "
                  f"(reached {pts['medium'][1]}) dev detection {fmt(by_group)} score {score:.3f}; "
                  f"high {pts['high'][0][0]:.4f} {fmt(pts['high'][0][5])}", flush=True)
            rows.append((score, path, h, a, k, pts, hours, clip_hours, n_pos))
    top = max(r[0] for r in rows)
    score, path, h, a, k, pts, hours, clip_hours, n_pos = min(
        (r for r in rows if r[0] >= top - TIE), key=lambda r: (r[4], -r[0]))
    print(f"dev: {n_pos} phrases, {hours:.2f} h of negatives, {clip_hours:.2f} h of clips; "
          f"chose {os.path.basename(path)} with min_frames {k}", flush=True)
    offsets = pts["medium"][0][3] or [0.1]
    phrase = [len(np.load(f)) / SR for f in glob.glob(os.path.join(CACHE, "tts", "train", "phrase", "*.npy"))
              if not f.endswith(".tmp.npy")]
    h["operating_points"] = {name: round(pts[name][0][0], 5) for name in ("low", "medium", "high")}
    h["min_frames"] = k
    h.pop("companion_bytes", None)  # a pair's main network is written alone
    h["end_offset_ms"] = int(round(max(0.0, float(np.median(offsets))) * 1000))
    h["phrase_ms"] = int(round(float(np.median(phrase)) * 1000))
    h["calibration"] = {
        "model": os.path.basename(path),
        "dev_negative_hours": round(hours, 2),
        "dev_clip_hours": round(clip_hours, 2),
        "dev_phrases": n_pos,
        "targets_reached": {name: pts[name][1] for name in pts},
        "points": {name: {"threshold": round(t[0], 5), "false_wakes_per_hour": round(t[1], 3),
                          "false_wakes_in_clips": t[4],
                          "recall": {c: round(v, 3) for c, v in t[2].items()},
                          "recall_by_voices": {c: round(v, 3) for c, v in t[5].items()}}
                   for name, (t, _) in pts.items()},
    }
    write_model(dst, h, a)
    print(json.dumps(h["calibration"], indent=1))
    print(f"wrote {dst}: points {h['operating_points']}, min_frames {k}, end offset "
          f"{h['end_offset_ms']} ms, phrase {h['phrase_ms']} ms")
    export_check(h, a, check)


def export_check(h, a, out, companions=()):
    """The exactness check: a held-out clip, its features and the logits of the word's
    main network (h, a) and of each of its `companions` (header, arrays), each alone."""
    shrink = 2 + 2 * sum(h["dilations"])
    check = sorted(glob.glob(os.path.join(CACHE, "eval", "quiet", "festival_*_03.wav")))
    if check:
        rate, x = wavfile.read(check[0])
        x = x[: int(2.5 * SR)]
        wavfile.write(out + ".wav", SR, x)
        xf = x.astype(np.float32) / 32768.0
        f = common.features(xf)
        lg = logits(h, a, f)
        json.dump({"clip": os.path.basename(check[0]), "features": f.astype(np.float64).round(3).tolist(),
                   "first_logit_frame": shrink, "logits": lg.astype(np.float64).round(4).tolist(),
                   "companion_logits": [logits(ch, ca, f).astype(np.float64).round(4).tolist()
                                        for ch, ca in companions]},
                  open(out + ".json", "w"), separators=(",", ":"))
        print(f"wrote {out}.wav/.json: {len(f)} frames, max logit {lg.max():.3f}")


if __name__ == "__main__":
    main()
