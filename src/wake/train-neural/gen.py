# This docstring is in the training text (texts.train_sentences reads the docstring of
# rlcompleter's `__main__`, this script): editing it changes the training paragraphs.
"""Stage 1: every voice says the phrase, commands, confusable phrases and paragraphs of
ordinary text (base utterances, 16 kHz, cached as .npy under CACHE/tts/SPLIT/KIND/).
Stage 2: rooms, microphones and backgrounds over them, cut into 2.4 s training clips,
features computed once (CACHE/feat/SPLIT-NNN.npz). Stage 3: the test set as WAV files
for the side-by-side evaluation in Rust (CACHE/eval/).
Each output is written atomically and skipped when present, so a rerun resumes."""

import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from multiprocessing import Pool

import numpy as np
from scipy.io import wavfile
from scipy.signal import resample_poly, butter, sosfilt, fftconvolve

import common
from common import SR, CACHE
import texts

# sox with its random generators (dither) seeded: the same job writes the same clip on
# every run.
SOX = ["sox", "-R", "-q"]


def atomic_save_npy(path, arr):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp.npy"
    np.save(tmp, arr)
    os.replace(tmp, path)


def read_wav(path):
    # The wave module, not scipy's reader: flite's 8 kHz voice writes a header with a
    # wrong byte rate that scipy refuses.
    import wave
    with wave.open(path, "rb") as w:
        rate, ch, width = w.getframerate(), w.getnchannels(), w.getsampwidth()
        raw = w.readframes(w.getnframes())
    if width != 2:
        raise ValueError(f"{path}: {8 * width}-bit audio, expected 16")
    x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    if ch > 1:
        x = x.reshape(-1, ch).mean(axis=1)
    if rate != SR:
        g = np.gcd(rate, SR)
        x = resample_poly(x, SR // g, rate // g).astype(np.float32)
    return x


def synth(engine, voice, variant, text, speed, pitch):
    """One utterance from a Debian TTS engine; speed and pitch are 0-1 knobs."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "o.wav")
        # Text through a file: a text starting with "-" would read as an option.
        tf = os.path.join(d, "t.txt")
        with open(tf, "w") as f:
            f.write(text + "\n")
        if engine in ("espeak-ng", "espeak"):
            v = f"{voice}+{variant}" if variant else voice
            s = int(115 + 90 * speed)
            p = int(15 + 70 * pitch)
            data = [f"--path={common.made_data(variant)}"] if common.is_made(variant) else []
            subprocess.run([engine, *data, "-v", v, "-s", str(s), "-p", str(p), "-w", out,
                            "-f", tf], check=True, capture_output=True, timeout=120)
        elif engine == "flite":
            stretch = 1.3 - 0.5 * speed
            subprocess.run(["flite", "-voice", voice, "--setf", f"duration_stretch={stretch:.2f}",
                            "-f", tf, "-o", out], check=True, capture_output=True, timeout=120)
        elif engine == "festival":
            stretch = 1.3 - 0.5 * speed
            subprocess.run(["text2wave", "-eval", f"(voice_{voice})", "-eval",
                            f"(Parameter.set 'Duration_Stretch {stretch:.2f})", "-o", out, tf],
                           check=True, capture_output=True, timeout=300)
        else:
            raise ValueError(engine)
        if not os.path.exists(out):
            raise subprocess.CalledProcessError(0, engine, stderr=b"no output for " + text.encode()[:80])
        return read_wav(out)


def trim(x, db=-40.0):
    """Cuts leading and trailing silence (10 ms frames under `db` of the loudest)."""
    if len(x) < 160:
        return x
    n = len(x) // 160
    e = (x[: n * 160].reshape(n, 160) ** 2).mean(axis=1) + 1e-12
    loud = np.nonzero(10 * np.log10(e / e.max()) > db)[0]
    if len(loud) == 0:
        return x[:0]
    return x[loud[0] * 160: (loud[-1] + 1) * 160]


# ------------------------------------------------------------------ stage 1: base TTS

COUNTS = {  # utterances per split and kind
    # Paragraphs 500 and up are new speech for mining hard negatives (mine.py).
    "train": {"phrase": 4000, "command": 1200, "confusable": 2400,
              "para": int(os.environ.get("WAKE_PARAS", "500"))},
    "dev": {"phrase": 300, "command": 150, "confusable": 200, "para": 40},
}
# Festival's other-language voices (common.TRAIN_FESTIVAL), round 6's extra speakers.
ACCENT_COUNTS = {"accent": {"phrase": 600, "command": 150, "confusable": 240, "para": 100}}
# Round 9's made-up espeak-ng speakers (common.MADE_VARIANTS). WAKE_MADE_PARAS makes more
# of their paragraphs for mine.py's round 10; each utterance's seed is its index, so the
# first 150 stay the same.
MADE_COUNTS = {"made": {"phrase": 1200, "command": 300, "confusable": 480,
                        "para": int(os.environ.get("WAKE_MADE_PARAS", "150"))}}
# Round 20's (common.WIDE_VARIANTS), as many.
WIDE_COUNTS = {"wide": {"phrase": 1200, "command": 300, "confusable": 480, "para": 150}}
SCALE = float(os.environ.get("WAKE_SCALE", "1"))


def voices_of(split):
    return [v for v in common.all_voices() if common.split_of(*v) == split]


def pick_voice(rng, voices):
    # Engines other than espeak have few voices: give them a fair share anyway.
    by_engine = {}
    for v in voices:
        by_engine.setdefault(v[0], []).append(v)
    weights = {"espeak-ng": 0.62, "espeak": 0.13, "flite": 0.25, "festival": 0.25}
    engines = sorted(by_engine)
    w = np.array([weights[e] for e in engines])
    e = engines[rng.choice(len(engines), p=w / w.sum())]
    return by_engine[e][rng.integers(len(by_engine[e]))]


def tts_job(job):
    split, kind, i, seed, train_sents = job
    path = os.path.join(CACHE, "tts", split, kind, f"{i:05d}.npy")
    if os.path.exists(path):
        return
    rng = np.random.default_rng(seed)
    engine, voice, variant = pick_voice(rng, voices_of(split))
    speed, pitch = rng.random(), rng.random()
    if kind == "phrase":
        said = texts.ACCENT_PHRASES if split == "accent" else texts.PHRASES
        text = said[rng.integers(len(said))]
    elif kind == "command":
        cmds = texts.TEST_COMMANDS if split == "test" else texts.TRAIN_COMMANDS
        text = cmds[rng.integers(len(cmds))]
    elif kind == "confusable":
        said = texts.ACCENT_CONFUSABLES if split == "accent" else texts.CONFUSABLES
        text = said[rng.integers(len(said))]
    else:
        k = int(rng.integers(4, 10))
        start = int(rng.integers(0, max(1, len(train_sents) - k)))
        text = " ".join(train_sents[start:start + k])
    try:
        x = synth(engine, voice, variant, text, speed, pitch)
    except subprocess.CalledProcessError as e:
        print(f"skip {engine} {voice}+{variant}: {e.stderr[:200]!r}", flush=True)
        x = np.zeros(0, np.float32)
    if kind != "para":
        x = trim(x)
    atomic_save_npy(path, x.astype(np.float32))
    with open(path[:-4] + ".json", "w") as f:
        json.dump({"engine": engine, "voice": voice, "variant": variant, "text": text,
                   "speed": speed, "pitch": pitch}, f)


def stage_tts(workers, counts=COUNTS):
    train_sents = texts.train_sentences()
    jobs = []
    for split, kinds in counts.items():
        for kind, n in kinds.items():
            for i in range(max(1, int(n * SCALE))):
                seed = (["train", "dev", "accent", "made", "wide"].index(split) * 10 + ["phrase", "command",
                        "confusable", "para"].index(kind)) * 1_000_003 + i
                jobs.append((split, kind, i, seed, train_sents))
    # Interleave so a partial run has some of everything.
    random.Random(0).shuffle(jobs)
    with Pool(workers) as pool:
        for k, _ in enumerate(pool.imap_unordered(tts_job, jobs, chunksize=8)):
            if k % 500 == 0:
                print(f"tts {k}/{len(jobs)}", flush=True)


def made_variant(rng, wide=False):
    """An espeak-ng variant file of a speaker no variant of espeak-ng's is: a random
    pitch and range, a vocal tract from 15% shorter to 20% longer than the base voice's
    (every formant scaled together, then each a little on its own, with random heights
    and widths), and sometimes breath, roughness, an echo, or one of the Klatt
    synthesisers. The ranges are within those espeak-ng's own variants span, voicing and
    formant heights kept low enough that few clip (8 of 200 saying "hey strawberry").
    `wide` (round 20) also reshapes the spectrum as espeak-ng's training and dev variants
    do and round 9's speakers never did: the first formants moved by different amounts
    (Alicia's 130/150/135%), often one or two of the higher ones moved far (to 9-40% or
    150-200%: steph's, Denis's, Jacky's, Tweaky's, marcelo's), often a tone curve
    (steph2's, anika's) and breath widths: the bundled word's dev misses outside babble
    are whole variants that do so."""
    base = rng.uniform(65, 230)
    lines = ["language variant", f"gender {'female' if base > 150 else 'male'}",
             f"pitch {base:.0f} {base * rng.uniform(1.1, 1.8):.0f}"]
    tract = rng.uniform(0.85, 1.2)
    own = (0.94, 1.06)
    far = set()
    if wide:
        own = (0.8, 1.4) if rng.random() < 0.5 else own
        if rng.random() < 0.6:
            far = set(rng.choice(np.arange(3, 9), size=int(rng.integers(1, 3)), replace=False))
    for i in range(9):
        f = 100 * tract * rng.uniform(*(own if 1 <= i <= 3 else (0.94, 1.06)))
        if i in far:
            f = rng.uniform(9, 40) if rng.random() < 0.5 else rng.uniform(150, 200)
        lines.append(f"formant {i} {f:.0f} {rng.uniform(60, 120):.0f} {rng.uniform(70, 160):.0f}")
    if wide and rng.random() < 0.5:
        # espeak-ng's tone: amplitude (0-255) at five rising frequencies.
        freqs = [rng.uniform(lo, hi) for lo, hi in ((80, 300), (400, 900), (1000, 1600),
                                                    (1800, 2600), (2800, 4000))]
        lines.append("tone " + " ".join(f"{f:.0f} {rng.uniform(10, 255):.0f}" for f in freqs))
    if wide and rng.random() < 0.3:
        lines.append("breathw " + " ".join(str(rng.integers(100, 400)) for _ in range(6)))
    lines += [f"flutter {rng.integers(0, 13)}", f"voicing {rng.uniform(30, 110):.0f}",
              f"consonants {rng.uniform(50, 120):.0f} {rng.uniform(40, 130):.0f}"]
    if rng.random() < 0.3:
        lines.append(f"roughness {rng.integers(1, 6)}")
    if rng.random() < 0.3:
        lines.append("breath " + " ".join(str(rng.integers(0, 25)) for _ in range(8)))
    if rng.random() < 0.3:
        lines.append(f"echo {rng.uniform(10, 150):.0f} {rng.uniform(5, 40):.0f}")
    if rng.random() < 0.3:
        lines.append(f"klatt {rng.integers(1, 5)}")
    return "\n".join(lines) + "\n"


def stage_voices(wide=False):
    """A private copy of espeak-ng's data with the made-up variants added
    (common.MADE_DATA, or round 20's common.WIDE_DATA), seeded by number so a rerun writes
    the same voices."""
    data, name, n, seed = ((common.WIDE_DATA, "wide", common.WIDE_VARIANTS, 8_000_000) if wide
                           else (common.MADE_DATA, "made", common.MADE_VARIANTS, 6_000_000))
    dst = os.path.join(data, "espeak-ng-data")
    if not os.path.isdir(dst):
        tmp = dst + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        # Without espeak-ng's own voice files: it lists at most 349 voices, languages
        # included, and drops the rest (131 languages and 200 variants fit).
        shutil.copytree(common.espeak_ng_data(), tmp, ignore=shutil.ignore_patterns("voices"))
        os.makedirs(os.path.join(tmp, "voices", "!v"))
        for i in range(n):
            with open(os.path.join(tmp, "voices", "!v", f"{name}{i:03d}"), "w") as f:
                f.write(made_variant(np.random.default_rng(seed + i), wide))
        os.replace(tmp, dst)


def load_kind(split, kind, first=0, end=None, root=CACHE):
    """Base utterances `first` <= index < `end` (under `root`: stop.py keeps its own)."""
    d = os.path.join(root, "tts", split, kind)
    out = []
    for f in sorted(os.listdir(d)):
        if f.endswith(".npy") and not f.endswith(".tmp.npy") and \
                first <= int(f[:5]) < (end if end is not None else 10**9):
            x = np.load(os.path.join(d, f))
            if len(x) > 1600:
                meta = json.load(open(os.path.join(d, f[:-4] + ".json")))
                out.append((x, meta))
    return out


# --------------------------------------------------------- backgrounds and rooms

def colored_noise(rng, n, colour):
    white = rng.standard_normal(n).astype(np.float32)
    if colour == "white":
        return white
    spec = np.fft.rfft(white)
    f = np.arange(len(spec), dtype=np.float64) + 1.0
    spec = spec / (np.sqrt(f) if colour == "pink" else f)
    y = np.fft.irfft(spec, n).astype(np.float32)
    return y / (np.std(y) + 1e-9)


def music(rng, n):
    """Synthetic music: notes of a random scale with harmonics, envelopes and a beat."""
    y = np.zeros(n, np.float32)
    t = 0
    base = 110.0 * 2 ** (rng.integers(0, 24) / 12)
    scale = [0, 2, 4, 5, 7, 9, 11, 12, 14, 16]
    while t < n:
        dur = int(SR * rng.choice([0.125, 0.25, 0.5, 0.75]))
        for _ in range(int(rng.integers(1, 4))):
            f0 = base * 2 ** (scale[rng.integers(len(scale))] / 12)
            tt = np.arange(min(dur, n - t)) / SR
            env = np.exp(-tt * rng.uniform(1, 8))
            tone = sum((0.6 ** h) * np.sin(2 * np.pi * f0 * (h + 1) * tt + rng.uniform(0, 6))
                       for h in range(int(rng.integers(1, 6))))
            y[t:t + len(tt)] += (env * tone).astype(np.float32)
        if rng.random() < 0.5:  # drum: a burst of filtered noise
            k = min(int(0.05 * SR), n - t)
            y[t:t + k] += (rng.standard_normal(k) * np.exp(-np.arange(k) / 200.0)).astype(np.float32)
        t += dur
    return y / (np.std(y) + 1e-9)


def crop_or_loop(x, n, rng):
    if len(x) == 0:
        return np.zeros(n, np.float32)
    if len(x) < n:
        x = np.tile(x, n // len(x) + 1)
    s = int(rng.integers(0, len(x) - n + 1))
    return x[s:s + n]


def babble(rng, n, paras):
    y = np.zeros(n, np.float32)
    for _ in range(int(rng.integers(3, 8))):
        x = crop_or_loop(paras[rng.integers(len(paras))][0], n, rng)
        y += x / (np.std(x) + 1e-9) * rng.uniform(0.5, 1.0)
    return y / (np.std(y) + 1e-9)


def background(rng, n, paras, kind=None):
    kind = kind or rng.choice(["white", "pink", "brown", "babble", "music", "tv", "hum"],
                              p=[0.12, 0.15, 0.13, 0.25, 0.15, 0.12, 0.08])
    if kind in ("white", "pink", "brown"):
        return colored_noise(rng, n, kind)
    if kind == "babble":
        return babble(rng, n, paras)
    if kind == "music":
        return music(rng, n)
    if kind == "tv":
        y = music(rng, n) * rng.uniform(0.3, 1.0) + crop_or_loop(
            paras[rng.integers(len(paras))][0], n, rng) * 8
        return y / (np.std(y) + 1e-9)
    t = np.arange(n) / SR  # mains hum and a fan
    f = rng.choice([50.0, 60.0])
    y = sum(np.sin(2 * np.pi * f * h * t) / h for h in range(1, 6)) + colored_noise(rng, n, "brown")
    return (y / (np.std(y) + 1e-9)).astype(np.float32)


def room_ir(rng, rt60=None):
    """A synthetic room impulse response: a direct path, a few early reflections and
    an exponentially decaying noise tail (RT60 0.2-1.0 s)."""
    rt60 = rt60 if rt60 is not None else rng.uniform(0.2, 1.0)
    n = int(SR * rt60)
    t = np.arange(n) / SR
    tail = rng.standard_normal(n) * np.exp(-6.9 * t / rt60)
    tail[: int(SR * rng.uniform(0.003, 0.02))] = 0
    ir = tail * rng.uniform(0.2, 0.6)
    ir[0] = 1.0
    for _ in range(6):
        ir[int(rng.integers(int(0.002 * SR), int(0.03 * SR)))] += rng.uniform(-0.5, 0.5)
    return (ir / np.sqrt((ir ** 2).sum())).astype(np.float32)


def sox_warp(x, rng):
    """Voice warping with sox: speed (pitch, formants and tempo together), tempo alone or
    pitch alone. Returns the audio and the factor its duration changed by."""
    r = rng.random()
    if r < 0.3:
        return x, 1.0
    if r < 0.55:
        f = rng.uniform(0.88, 1.14)
        eff, dur = ["speed", f"{f:.3f}"], 1.0 / f
    elif r < 0.8:
        f = rng.uniform(0.8, 1.25)
        eff, dur = ["tempo", "-s", f"{f:.3f}"], 1.0 / f
    else:
        eff, dur = ["pitch", f"{rng.uniform(-350, 350):.0f}"], 1.0
    raw = (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()
    fmt = ["-t", "raw", "-r", str(SR), "-e", "signed", "-b", "16", "-c", "1"]
    p = subprocess.run([*SOX, *fmt, "-", *fmt, "-", *eff, "rate", str(SR)],
                       input=raw, capture_output=True, check=True, timeout=60)
    return np.frombuffer(p.stdout, "<i2").astype(np.float32) / 32768.0, dur


def sox_reverb(x, rng):
    """sox's reverb over a random room."""
    raw = (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()
    fmt = ["-t", "raw", "-r", str(SR), "-e", "signed", "-b", "16", "-c", "1"]
    args = [f"{rng.uniform(20, 95):.0f}", f"{rng.uniform(20, 80):.0f}",
            f"{rng.uniform(20, 100):.0f}", "100", f"{rng.uniform(0, 30):.0f}", "0"]
    p = subprocess.run([*SOX, *fmt, "-", *fmt, "-", "gain", "-6", "reverb", *args],
                       input=raw, capture_output=True, check=True, timeout=60)
    y = np.frombuffer(p.stdout, "<i2").astype(np.float32) / 32768.0
    return y[: len(x)] if len(y) >= len(x) else np.pad(y, (0, len(x) - len(y)))


def mic(y, rng):
    """Cheap microphones and sound cards: band limits, gain, sometimes clipping."""
    r = rng.random()
    if r < 0.15:
        y = sosfilt(butter(4, [300, 3400], "bandpass", fs=SR, output="sos"), y)
    elif r < 0.45:
        lo, hi = rng.uniform(60, 400), rng.uniform(3000, 7600)
        y = sosfilt(butter(2, [lo, hi], "bandpass", fs=SR, output="sos"), y)
    peak = np.abs(y).max() + 1e-9
    level = 10 ** (rng.uniform(-40, -1) / 20)
    y = y / peak * level
    if rng.random() < 0.05:
        y = np.clip(y * rng.uniform(1.5, 4), -level, level)
    return y.astype(np.float32)


def rms_active(x):
    n = len(x) // 160
    if n == 0:
        return 1e-9
    e = (x[: n * 160].reshape(n, 160) ** 2).mean(axis=1)
    top = np.sort(e)[-max(1, n // 3):]
    return float(np.sqrt(top.mean()) + 1e-9)


def over_music(x, rng):
    """`x` with music (a TV) 0-10 dB under its speech, as every negative file over music."""
    return x + music(rng, len(x)) * rms_active(x) / 10 ** (rng.uniform(0, 10) / 20)


def room(y, rng, paras, mix=""):
    """Reverberation, then a background at a random SNR (or none), then the microphone.
    `mix` "noisy": always a background, mostly other people talking (babble, a TV) at low
    SNR, the rooms the first recipe left the model weakest in; "babble": always other
    people talking (babble, a TV) at 0-6 dB SNR, where the second round still missed most
    phrases; "dry": no room, no background (round 8: in a quiet room the score of some
    unseen voices fell under the threshold 11-23 frames after the phrase, too soon for the
    detector's rule, where in reverberant rooms it stayed up)."""
    if mix == "dry":
        # As a file of synthetic speech is, or a close microphone in a quiet room: often
        # no floor at all (digital silence between words).
        if rng.random() < 0.5:
            y = y + colored_noise(rng, len(y), "white") * 10 ** (rng.uniform(-90, -60) / 20)
        return mic(y, rng)
    r = rng.random()
    if r < 0.25:
        y = sox_reverb(y, rng)
    elif r < 0.55:
        y = fftconvolve(y, room_ir(rng))[: len(y)].astype(np.float32)
    if mix == "noisy":
        kind = rng.choice(["babble", "tv", "music", "white", "pink", "brown"],
                          p=[0.55, 0.15, 0.1, 0.05, 0.08, 0.07])
        snr = rng.uniform(-3, 12) if kind in ("babble", "tv") else rng.uniform(0, 15)
        b = background(rng, len(y), paras, kind=str(kind))
        y = y + b * rms_active(y) / 10 ** (snr / 20)
    elif mix == "babble":
        kind = "babble" if rng.random() < 0.8 else "tv"
        b = background(rng, len(y), paras, kind=kind)
        y = y + b * rms_active(y) / 10 ** (rng.uniform(0, 6) / 20)
    elif rng.random() < 0.75:
        snr = rng.uniform(-2, 25)
        b = background(rng, len(y), paras)
        y = y + b * rms_active(y) / 10 ** (snr / 20)
    y = y + colored_noise(rng, len(y), "white") * 10 ** (rng.uniform(-90, -60) / 20)
    return mic(y, rng)


# ----------------------------------------------------------- stage 2: training clips

CLIP = int(2.4 * SR)
END_LO, END_HI = 1.6, 1.9  # where the phrase ends in a positive clip (seconds)
SHARD = int(os.environ.get("WAKE_SHARD", "400"))


def make_positive(rng, phrases, commands, paras, confus):
    ph, meta = phrases[rng.integers(len(phrases))]
    # Same voice for what comes before and after, when there is one.
    same = [c for c in commands if c[1]["engine"] == meta["engine"] and c[1]["voice"] == meta["voice"]]
    pre = np.zeros(int(SR * rng.uniform(0.0, 2.0)), np.float32)
    if rng.random() < 0.35:
        src = paras if rng.random() < 0.6 else confus
        p = src[rng.integers(len(src))][0]
        k = int(SR * rng.uniform(0.3, 1.8))
        pre = np.concatenate([crop_or_loop(p, k, rng) * rng.uniform(0.3, 1.5), pre])
    gap = np.zeros(int(SR * rng.uniform(0.0, 0.5)), np.float32)
    post = np.zeros(0, np.float32)
    if rng.random() < 0.7 and commands:
        post = (same or commands)[rng.integers(len(same or commands))][0]
    x = np.concatenate([pre, ph, gap, post, np.zeros(int(0.5 * SR), np.float32)])
    return warp_and_place(x, len(pre) + len(ph), rng)


def warp_and_place(x, end, rng):
    """Warps a positive's audio and cuts a clip of it whose phrase, ending at sample `end`,
    ends between END_LO and END_HI; returns the clip and where the phrase now ends."""
    x, f = sox_warp(x, rng)
    end = int(end * f)
    want = int(SR * rng.uniform(END_LO, END_HI))
    shift = want - end  # where clip sample 0 comes from: x[-shift]
    if shift > 0:
        x = np.concatenate([np.zeros(shift, np.float32), x])
    else:
        x = x[-shift:]
    x = np.pad(x, (0, max(0, CLIP - len(x))))[:CLIP]
    return x, want


def make_negative(rng, paras, confus, phrases):
    r = rng.random()
    if r < 0.55:
        x = crop_or_loop(paras[rng.integers(len(paras))][0], CLIP, rng)
    elif r < 0.85:
        c = confus[rng.integers(len(confus))][0]
        pre = np.zeros(int(SR * rng.uniform(0.3, 1.9)), np.float32)
        if rng.random() < 0.3:  # a phrase's piece, the rest of it missing
            p = phrases[rng.integers(len(phrases))][0]
            c = p[: int(len(p) * rng.uniform(0.3, 0.6))] if rng.random() < 0.5 else p[int(len(p) * 0.45):]
        x = np.concatenate([pre, c, np.zeros(CLIP, np.float32)])[:CLIP]
    elif r < 0.95:
        x = np.zeros(CLIP, np.float32)
        x = x + background(rng, CLIP, paras) * 0.1
    else:
        x = np.zeros(CLIP, np.float32)
    x, _ = sox_warp(x, rng) if rng.random() < 0.5 else (x, 1.0)
    return np.pad(x, (0, max(0, CLIP - len(x))))[:CLIP]


_DATA = {}


def _data(split):
    if split not in _DATA:
        # The first 500 paragraphs: those after them are mine.py's.
        _DATA[split] = {k: load_kind(split, k, 0, 500 if k == "para" else None)
                        for k in ("phrase", "command", "confusable", "para")}
    return _DATA[split]


def shard_job(job):
    split, k = job
    path = os.path.join(CACHE, "feat", f"{split}-{k:03d}.npz")
    if os.path.exists(path):
        return
    # "noisy" and "babble": training voices, half of them saying the phrase, always over a
    # background (the second and third rounds' extra clips, see room()). "accent": round
    # 6's festival voices, half of them saying the phrase, in the usual rooms (other
    # people talking in them are the training voices).
    # "dry": round 8's, in no room at all, a third of them positive as in "train" (half
    # made the round fire on more dry dev speech); every fourth shard is festival's voices
    # (accent), the rest the training voices. "made": round 9's made-up espeak-ng speakers,
    # half of them saying the phrase, in the usual rooms (as "accent"); "wide", round 20's,
    # the same. "accbabble": round 15's festival voices always over other people talking,
    # as "babble" is for the training voices: no earlier round heard festival's voices
    # there, and over babble the word heard festival's dev voices least (27% at medium).
    mix = "babble" if split == "accbabble" else split if split in ("noisy", "babble", "dry") else ""
    half = split in ("noisy", "babble", "accent", "made", "wide", "accbabble")  # half positive, not a third
    if split in ("accent", "accbabble") or (split == "dry" and k % 4 == 3):
        voices = "accent"
    else:
        voices = "train" if mix else split
    d = _data(voices)
    paras = _data("train")["para"] if voices in ("accent", "made", "wide") else d["para"]
    rng = np.random.default_rng(1000 + k + {"train": 0, "dev": 500_000, "noisy": 2_000_000,
                                            "babble": 3_000_000, "accent": 4_000_000,
                                            "dry": 5_000_000, "made": 6_000_000,
                                            "accbabble": 7_000_000, "wide": 8_000_000}[split])
    X, Y = [], []
    for i in range(SHARD):
        if i % (2 if half else 3) == 0:
            x, end = make_positive(rng, d["phrase"], d["command"], d["para"], d["confusable"])
            y = int(round(end / common.HOP))
        else:
            x = make_negative(rng, d["para"], d["confusable"], d["phrase"])
            y = -1
        x = room(x, rng, paras, mix)
        X.append(common.features(x).astype(np.float16))
        Y.append(y)
    save_shard(path, X, Y)


def save_shard(path, X, Y):
    """A shard of clips' features and labels (train.py's input), written atomically."""
    tmp = path + ".tmp.npz"
    np.savez(tmp, x=np.stack(X), y=np.array(Y, np.int32))
    os.replace(tmp, path)
    print(f"shard {os.path.basename(path)[:-4]}", flush=True)


def stage_feat(workers, train_shards, dev_shards):
    os.makedirs(os.path.join(CACHE, "feat"), exist_ok=True)
    jobs = [("dev", k) for k in range(dev_shards)] + [("train", k) for k in range(train_shards)]
    with Pool(workers) as pool:
        list(pool.imap_unordered(shard_job, jobs))


def stage_feat_mixed(workers, split, shards):
    os.makedirs(os.path.join(CACHE, "feat"), exist_ok=True)
    with Pool(workers) as pool:
        list(pool.imap_unordered(shard_job, [(split, k) for k in range(shards)]))


# ------------------------------------------------------------ stage 3: the test set

def test_voices():
    vs = voices_of("test")
    by = {}
    for v in vs:
        by.setdefault(v[0], []).append(v)
    rng = random.Random(7)
    # Every non-espeak test voice, and a spread of the held-out espeak ones.
    picked = by.get("festival", []) + by.get("flite", [])
    picked += rng.sample(by.get("espeak-ng", []), 20) + rng.sample(by.get("espeak", []), 4)
    return picked


def write_wav(path, x):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp.wav"
    wavfile.write(tmp, SR, (np.clip(x, -1, 1) * 32767).astype(np.int16))
    os.replace(tmp, path)


def read_on(voice, sents, rng, seconds, pitch=None, normalise=False):
    """A voice reading `sents` three at a time from a random one on, each stretch at a random
    rate (and pitch, unless `pitch` is given) and followed by a pause of 0.2-1.2 s, until
    `seconds` of audio: the stretches and pauses in order. `normalise` brings each stretch
    to the same peak. The random draws are in the order every negative file was written."""
    engine, v, variant = voice
    parts, total = [], 0
    j = int(rng.integers(len(sents)))
    while total < seconds * SR:
        text = " ".join(sents[j % len(sents): j % len(sents) + 3])
        try:
            s = trim(synth(engine, v, variant, text, rng.random(),
                           rng.random() if pitch is None else pitch))
        except subprocess.SubprocessError as e:
            # festival's diphone voices crash on some text ("to: ... There"): that stretch
            # is left out (said, so a voice that always fails shows), and its pause and the
            # draws of every stretch after it stay.
            who = f"{engine} {v}{'+' + variant if variant else ''}"
            print(f"left out {who} reading {text[:60]!r}: {e!r:.120}", flush=True)
            s = np.zeros(0, np.float32)
        j += 3
        if normalise and len(s):
            s = s / (np.abs(s).max() + 1e-9) * 0.5
        parts += [s, np.zeros(int(SR * rng.uniform(0.2, 1.2)), np.float32)]
        total += len(s) + len(parts[-1])
    return parts


def sox_pitch(x, cents):
    """Audio pitched by sox, formants with the pitch (another speaker's vocal tract)."""
    raw = (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()
    fmt = ["-t", "raw", "-r", str(SR), "-e", "signed", "-b", "16", "-c", "1"]
    p = subprocess.run([*SOX, *fmt, "-", *fmt, "-", "pitch", str(cents)],
                       input=raw, capture_output=True, check=True)
    return np.frombuffer(p.stdout, "<i2").astype(np.float32) / 32768.0


def eval_job(job):
    kind, i, voice, extra, split = job
    rng = np.random.default_rng(77_000 + i * 13 + ["phrase", "speech", "tv", "noise"].index(kind)
                                + {"test": 0, "dev": 5_000_000, "indic": 9_000_000}[split])
    root = os.path.join(CACHE, {"test": "eval", "dev": "eval-dev", "indic": "eval-indic"}[split])
    engine, v, variant = voice
    if kind == "phrase":
        # One utterance per voice and command: "hey strawberry" then the command, same
        # voice, as one person would say it; every room condition reuses it.
        name, cmd, pitch_cents = extra
        out = {c: os.path.join(root, c, name + ".wav") for c in ("quiet", "reverb", "noise10", "babble5")}
        if all(os.path.exists(p) for p in out.values()):
            return
        said = (common.DEV_FESTIVAL_PHRASE if v in common.DEV_FESTIVAL
                else common.INDIC_FESTIVAL.get(v, "hey strawberry"))
        ph = trim(synth(engine, v, variant, said, 0.45, 0.5))
        co = trim(synth(engine, v, variant, cmd, 0.45, 0.5))
        lead = np.zeros(int(SR * 1.0), np.float32)
        gap = np.zeros(int(SR * 0.3), np.float32)
        x = np.concatenate([lead, ph, gap, co, np.zeros(int(SR * 0.7), np.float32)])
        end = len(lead) + len(ph)
        if pitch_cents:
            x = sox_pitch(x, pitch_cents)
        x = x / (np.abs(x).max() + 1e-9) * 0.5
        babble_src = extra_babble("dev" if split == "dev" else "test")
        conds = {
            "quiet": x,
            "reverb": fftconvolve(x, room_ir(rng, rt60=0.7))[: len(x)].astype(np.float32),
            "noise10": x + colored_noise(rng, len(x), "pink") * rms_active(x) / 10 ** (10 / 20),
            "babble5": x + babble(rng, len(x), babble_src) * rms_active(x) / 10 ** (5 / 20),
        }
        for c, y in conds.items():
            y = y / (np.abs(y).max() + 1e-9) * 0.5
            write_wav(out[c], y)
            with open(out[c][:-4] + ".txt", "w") as f:
                f.write(f"{end / SR:.3f}\n")
    else:
        # Held-out ordinary speech (and, mixed in, music or noise), in 5-minute files.
        path = os.path.join(root, "negative", f"{kind}-{i:03d}.wav")
        if os.path.exists(path):
            return
        sents = neg_sentences(split, i >= FIRST_NEG[kind])
        # Noise files past the first set skip the speech they would discard (the first
        # ones keep it: their random draws, and so their files, stay as they were).
        skip = kind == "noise" and i >= FIRST_NEG[kind]
        parts = read_on(voice, sents, rng, 0 if skip else 300)
        x = np.concatenate(parts)[: 300 * SR] if parts else np.zeros(300 * SR, np.float32)
        x = x / (np.abs(x).max() + 1e-9) * 0.5
        if kind == "tv":
            x = over_music(x, rng)
        elif kind == "noise":
            x = x * 0.0 + background(rng, len(x), extra_babble(split), kind=str(rng.choice(
                ["white", "pink", "brown", "music", "hum", "babble"]))) * 0.1
        x = x / (np.abs(x).max() + 1e-9) * 0.5
        write_wav(path, x)


def stage_indic(workers):
    """eval-indic/: festival's Hindi, Marathi and Telugu voices (common.INDIC_FESTIVAL), as
    said and pitched 3 semitones up and down as the test set's other speakers are, each
    saying the phrase and its 16 commands in the test set's four rooms (the test set's
    babble). Held out and measured only: calibrate.py does not read these; `wakeword test`
    counts what a word hears (BENCHMARKS.md, "An Indian speaker's voices")."""
    for v in common.INDIC_FESTIVAL:
        lang = v.split("_")[0]
        if not os.path.isdir(f"/usr/share/festival/voices/{lang}/{v}"):
            raise SystemExit(f"festival's {v} voice not found: apt-get install festvox-hi-nsk "
                             "festvox-mr-nsk festvox-te-nsk")
        if not os.path.exists(indic_sample(v)):
            raise SystemExit(f"{indic_sample(v)} not found: apt-get install festival-{INDIC_LANG[lang]} "
                             "(festvox-*-nsk only recommends it); where dpkg leaves out "
                             "/usr/share/doc, reinstall it with that path allowed")
    jobs, k = [], 0
    for v, cmds in texts.INDIC_COMMANDS.items():
        for cents in (0, -300, 300):
            for ci, cmd in enumerate(cmds):
                pitch = "default" if cents == 0 else f"pitch{cents:+d}"
                jobs.append(("phrase", k, ("festival", v, ""), (f"festival_{v}_{pitch}_{ci:02d}", cmd, cents),
                             "indic"))
                k += 1
    with Pool(workers) as pool:
        list(pool.imap_unordered(eval_job, jobs))
        list(pool.imap_unordered(indic_negative_job, range(12)))


INDIC_LANG = {"hindi": "hi", "marathi": "mr", "telugu": "te"}


def indic_sample(voice):
    """The running text Debian ships in the voice's language (its festival-xx package)."""
    return f"/usr/share/doc/festival-{INDIC_LANG[voice.split('_')[0]]}/examples/sample.txt"


def indic_negative_job(i):
    """eval-indic/negative/: one of 12 five-minute files (an hour) of the voices reading
    their language's sample text (festival-hi, -mr, -te's examples/sample.txt, the only
    running text in these languages Debian ships: 2.7, 2.3 and 0.8 minutes as said) from a
    random sentence on, at random rates, and their commands, four files a voice: as said,
    pitched 3 semitones up and down, and as said over music (a TV). Few minutes of
    distinct speech said many ways: a check that the languages' sounds do not wake the
    word, not a false-wake rate to set beside the test set's 10 hours."""
    path = os.path.join(CACHE, "eval-indic", "negative", f"indic-{i:03d}.wav")
    if os.path.exists(path):
        return
    rng = np.random.default_rng(99_000 + i)
    voice = list(common.INDIC_FESTIVAL)[i % 3]
    with open(indic_sample(voice), encoding="utf-8") as f:
        sents = [t.strip() for t in re.split(r"[।.!?\n]+", f.read()) if t.strip()]
    sents += texts.INDIC_COMMANDS[voice]
    x = np.concatenate(read_on(("festival", voice, ""), sents, rng, 300, pitch=0.5))[: 300 * SR]
    cents = (0, 300, -300)[(i // 3) % 3]
    if cents:
        x = sox_pitch(x / (np.abs(x).max() + 1e-9) * 0.5, cents)
    x = x / (np.abs(x).max() + 1e-9) * 0.5
    if i >= 9:
        x = over_music(x, rng)
    write_wav(path, x / (np.abs(x).max() + 1e-9) * 0.5)


# Other vocal tract lengths (round 12): the quiet room's phrases pitched by sox, every
# frequency with the pitch as a shorter or longer vocal tract moves it, so up +5 and +7
# semitones they sound as children and small women might and down as deep voices; the
# rooms' "other speakers" reach only 3 semitones, where the word hears every dev phrase.
# calibrate.py does not read these; `wakeword test` counts what a word hears (BENCHMARKS.md,
# "Round 12").
PITCHES = (-700, -500, 500, 700)


def sox_file_job(job):
    """sox's effects from one WAV file to another, written atomically and kept on reruns."""
    src, dst, effects = job
    if not os.path.exists(dst):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        subprocess.run([*SOX, src, dst[:-4] + ".tmp.wav", *effects], check=True,
                       capture_output=True, timeout=60)
        os.replace(dst[:-4] + ".tmp.wav", dst)


def unpitched_quiet(root):
    """The quiet room's phrases of a split (root) that are not pitched already."""
    return [p for p in sorted(glob.glob(os.path.join(root, "quiet", "*.wav")))
            if "_pitch" not in os.path.basename(p) and not p.endswith(".tmp.wav")]


def stage_pitched(workers, split):
    """eval(-dev)/pitched/CENTS/: the quiet room's phrases not pitched already, at PITCHES."""
    root = os.path.join(CACHE, "eval" if split == "test" else "eval-dev")
    jobs = [(p, os.path.join(root, "pitched", f"{c:+d}", os.path.basename(p)), ["pitch", str(c)])
            for c in PITCHES for p in unpitched_quiet(root)]
    with Pool(workers) as pool:
        list(pool.imap_unordered(sox_file_job, jobs, chunksize=16))


# Other frequency responses: the quiet room's phrases, each twice, through three random
# resonances or dips (sox equalizer: 150-6500 Hz, Q 0.7-4, -18 to +12 dB) and a bass or
# treble shelf (+-8 dB), as microphones, enclosures and loudspeakers colour a voice; mic()'s
# band limits are flat inside the band. A random generator per phrase index, so a rerun
# writes the same chains (CACHE/eval(-dev)/coloured/effects.txt lists them). calibrate.py
# does not read these; `wakeword test` counts what a word hears (BENCHMARKS.md, "Other
# frequency responses").
def coloured_effects(index, copy):
    r = random.Random(index * 2 + copy)
    eff = []
    for _ in range(3):
        f = 150 * (6500 / 150) ** r.random()
        eff += ["equalizer", f"{f:.0f}", f"{r.uniform(0.7, 4):.2f}q", f"{r.uniform(-18, 12):.1f}"]
    return eff + [r.choice(["bass", "treble"]), f"{r.uniform(-8, 8):.1f}", "norm", "-3"]


def stage_coloured(workers, split):
    """eval(-dev)/coloured/: the quiet room's phrases not pitched already, twice each."""
    root = os.path.join(CACHE, "eval" if split == "test" else "eval-dev")
    out = os.path.join(root, "coloured")
    jobs = [(p, os.path.join(out, os.path.basename(p)[:-4] + f"_col{c}.wav"), coloured_effects(i, c))
            for i, p in enumerate(unpitched_quiet(root)) for c in (0, 1)]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "effects.txt"), "w") as f:
        f.writelines(f"{os.path.basename(d)} {' '.join(e)}\n" for _, d, e in jobs)
    with Pool(workers) as pool:
        list(pool.imap_unordered(sox_file_job, jobs, chunksize=16))


# Other speaking rates: the quiet room's phrases slower and faster (sox tempo, pitch and
# formants kept; 0.65 from 2026-12-03, a slow, deliberate speaker); the voices' own rates
# span less. Measured only, as the coloured phrases
# (BENCHMARKS.md, "Other speaking rates").
TEMPOS = ("0.65", "0.8", "1.25", "1.4")


def stage_tempo(workers, split):
    """eval(-dev)/tempo/RATE/: the quiet room's phrases not pitched already, at TEMPOS."""
    root = os.path.join(CACHE, "eval" if split == "test" else "eval-dev")
    jobs = [(p, os.path.join(root, "tempo", t, os.path.basename(p)), ["tempo", "-s", t])
            for t in TEMPOS for p in unpitched_quiet(root)]
    with Pool(workers) as pool:
        list(pool.imap_unordered(sox_file_job, jobs, chunksize=16))


# Across the room with the TV on: the reverberant room's phrases (RT60 0.7 s) with a TV in
# the same room, a stretch of one of the split's first six TV files (its voices reading its
# text over music; the same six whatever WAKE_NEG_HOURS asks) through a room of its own, 10
# and 5 dB under the phrase (both levels as rms_active measures speech). A random generator
# per phrase, so a rerun writes the same files. calibrate.py does not read these; wake_eval
# counts them as it counts the other rooms (BENCHMARKS.md, "Across the room with the TV on").
TV_ROOMS = {"tv10": 10, "tv5": 5}


def tv_job(job):
    src, index, tvs = job
    root = os.path.dirname(os.path.dirname(src))
    name = os.path.basename(src)
    out = {c: os.path.join(root, c, name) for c in TV_ROOMS}
    if all(os.path.exists(p) for p in out.values()):
        return
    rng = np.random.default_rng(88_000 + index)
    x = read_wav(src)
    tv = read_wav(tvs[int(rng.integers(len(tvs)))])
    start = int(rng.integers(0, len(tv) - len(x)))
    b = fftconvolve(tv[start:start + len(x)], room_ir(rng))[: len(x)].astype(np.float32)
    for c, db in TV_ROOMS.items():
        y = x + b * rms_active(x) / rms_active(b) / 10 ** (db / 20)
        write_wav(out[c], y / (np.abs(y).max() + 1e-9) * 0.5)
        shutil.copyfile(src[:-4] + ".txt", out[c][:-4] + ".txt")


def stage_tv(workers, split):
    """eval(-dev)/tv10/ and tv5/: the reverberant phrases with the split's TV files under them."""
    root = os.path.join(CACHE, "eval" if split == "test" else "eval-dev")
    tvs = sorted(p for p in glob.glob(os.path.join(root, "negative", "tv-*.wav"))
                 if not p.endswith(".tmp.wav"))[:6]
    phrases = sorted(p for p in glob.glob(os.path.join(root, "reverb", "*.wav"))
                     if not p.endswith(".tmp.wav"))
    if phrases and not tvs:
        sys.exit(f"{root}: reverberant phrases but no TV files (negative/tv-*.wav) to put under "
                 f"them: run `gen.py {'eval-test' if split == 'test' else 'eval-dev'}` first")
    with Pool(workers) as pool:
        list(pool.imap_unordered(tv_job, [(p, i, tvs) for i, p in enumerate(phrases)], chunksize=16))


# The test set's first negatives (2.83 h): speech, speech over music, noise alone.
FIRST_NEG = {"speech": 24, "tv": 6, "noise": 4}
_SENTS = {}


def neg_sentences(split, more):
    """Text for negatives: the dev set's is training text; the test set's first files
    read the held-out text, later ones (WAKE_NEG_HOURS) that and more held-out text."""
    key = (split, more and split == "test")
    if key not in _SENTS:
        if split != "test":
            _SENTS[key] = texts.train_sentences()
        else:
            _SENTS[key] = texts.test_sentences() + (texts.more_test_sentences() if more else [])
    return _SENTS[key]


def dev_voices_job(i):
    """One 5-minute file of the dev voices' negatives (eval-dev/voices): five dev voices in
    turn, a minute each, reading texts.dev_sentences(); every third file over music (a
    TV). The first dev negatives are 16 dev voices reading training text; an ordinary
    sentence of a dev voice the 16 left out woke a candidate word in the test suite
    (BENCHMARKS.md, "A third network"), so these go round every dev voice (espeak-ng's and
    espeak's: voices_of("dev") has no festival or flite voice). A voice reads on past its
    minute to the end of a sentence and the file is cut at 5 minutes, so the fifth voice
    gets about two thirds of a minute; the bundled word was calibrated on these files."""
    path = os.path.join(CACHE, "eval-dev", "voices", f"voices-{i:03d}.wav")
    if os.path.exists(path):
        return
    rng = np.random.default_rng(88_000 + i)
    voices = voices_of("dev")
    if "dev" not in _SENTS:
        _SENTS["dev"] = texts.dev_sentences()
    sents = _SENTS["dev"]
    five_voices(path, voices, sents, rng, i)


def five_voices(path, voices, sents, rng, i):
    """File `i` of five voices reading `sents` a minute each in turn (from voice 5i on), cut
    at 5 minutes, every third over music (a TV)."""
    parts = []
    for n in range(5):
        parts += read_on(voices[(i * 5 + n) % len(voices)], sents, rng, 60, normalise=True)
    x = np.concatenate(parts)[: 300 * SR]
    if i % 3 == 2:
        x = over_music(x, rng)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_wav(path, x / (np.abs(x).max() + 1e-9) * 0.5)


def stage_dev_voices(workers):
    """WAKE_DEV_VOICE_HOURS (default 10) of dev_voices_job's files."""
    n = int(np.ceil(float(os.environ.get("WAKE_DEV_VOICE_HOURS", "10")) * 12))
    with Pool(workers) as pool:
        for k, _ in enumerate(pool.imap_unordered(dev_voices_job, range(n))):
            if k % 20 == 0:
                print(f"dev voices {k}/{n}", flush=True)


# Why the dev hours wake the word more often than the held-out hours (measured only): the
# voices crossed with the texts. "heldvoices-devtext" is the test voices reading the dev
# voices' text, "devvoices-heldtext" every dev voice reading the held-out text, each in
# five_voices's files, as dev_voices_job.
CROSS = {"heldvoices-devtext": ("test", "dev"), "devvoices-heldtext": ("dev", "test")}


def cross_job(job):
    name, i = job
    path = os.path.join(CACHE, "eval-cross", name, f"{name}-{i:03d}.wav")
    if os.path.exists(path):
        return
    voices_split, text_split = CROSS[name]
    # Seeds no other file of this script uses (eval-indic's are 99,000 on).
    rng = np.random.default_rng(200_000 + i + 100_000 * list(CROSS).index(name))
    voices = test_voices() if voices_split == "test" else voices_of("dev")
    if name not in _SENTS:
        _SENTS[name] = (texts.dev_sentences() if text_split == "dev"
                        else texts.test_sentences() + texts.more_test_sentences())
    five_voices(path, voices, _SENTS[name], rng, i)


def stage_cross(workers):
    """WAKE_CROSS_HOURS (default 20) of each of CROSS's sets."""
    n = int(np.ceil(float(os.environ.get("WAKE_CROSS_HOURS", "20")) * 12))
    with Pool(workers) as pool:
        for k, _ in enumerate(pool.imap_unordered(cross_job, [(c, i) for c in CROSS
                                                              for i in range(n)])):
            if k % 20 == 0:
                print(f"cross {k}/{2 * n}", flush=True)


_BABBLE = {}


def extra_babble(split):
    """Babble for the test (dev) set: test (dev) voices reading test (training) text."""
    if split not in _BABBLE:
        sents = texts.test_sentences() if split == "test" else texts.train_sentences()
        rng = random.Random(3)
        vs = [v for v in voices_of(split) if v[0] == "espeak-ng"]
        _BABBLE[split] = []
        for k in range(8):
            e, v, var = rng.choice(vs)
            _BABBLE[split].append((synth(e, v, var, " ".join(sents[k * 6:(k + 1) * 6]),
                                         rng.random(), rng.random()), {}))
    return _BABBLE[split]


def stage_eval(workers, split="test"):
    """The test set (split "test": held-out voices, commands and text) or its dev twin
    (split "dev": dev voices, training commands and text) for choosing operating points
    without looking at the test set."""
    jobs = []
    if split == "dev":
        rng = random.Random(11)
        voices = rng.sample(voices_of("dev"), 16)
        for vi, voice in enumerate(voices):
            for ci, cmd in enumerate(texts.TRAIN_COMMANDS[:8]):
                name = f"{voice[0]}_{voice[1]}_{voice[2] or 'default'}_{ci:02d}"
                jobs.append(("phrase", vi * 100 + ci, voice, (name, cmd, 0), split))
        # Other engines' voices, as said and pitched up and down 3 semitones as the test
        # set's other speakers are: flite's training voices (common.DEV_FLITE), the dev
        # set's non-espeak timing, and festival's other-language voices
        # (common.DEV_FESTIVAL), voices and an engine no round trained on.
        for engine, dev_voices, first in (("flite", common.DEV_FLITE, 20_000),
                                          ("festival", common.DEV_FESTIVAL, 30_000)):
            k = first
            for v in dev_voices:
                for cents in (0, -300, 300):
                    for ci, cmd in enumerate(texts.TRAIN_COMMANDS[:8]):
                        pitch = "default" if cents == 0 else f"pitch{cents:+d}"
                        name = f"{engine}_{v}_{pitch}_{ci:02d}"
                        jobs.append(("phrase", k, (engine, v, ""), (name, cmd, cents), split))
                        k += 1
        # Negatives: 2 hours, 16 x 5 min speech, 6 x 5 min speech over music, 2 x 5 min
        # noise and music alone (the bundled word's calibration); WAKE_DEV_NEG_HOURS asks
        # for more in 5-minute files (2 of 3 speech, 1 of 4 over music, 1 of 12 noise).
        # calibrate.py's medium point allows one false wake per 10 dev hours, none in 2,
        # where one event sets it; round 9's candidate was calibrated on 10.
        n = max(24, int(np.ceil(float(os.environ.get("WAKE_DEV_NEG_HOURS", "2")) * 12)))
        for i in range(n):
            if i < 24:
                kind = "speech" if i < 6 or 8 <= i < 18 else "tv" if i < 8 or i < 22 else "noise"
            else:
                kind = "speech" if (i - 24) % 12 < 8 else "tv" if (i - 24) % 12 < 11 else "noise"
            jobs.append((kind, i, voices[i % len(voices)], None, split))
        with Pool(workers) as pool:
            list(pool.imap_unordered(eval_job, jobs))
        stage_tv(workers, split)
        return
    voices = test_voices()
    for vi, voice in enumerate(voices):
        for ci, cmd in enumerate(texts.TEST_COMMANDS):
            name = f"{voice[0]}_{voice[1]}_{voice[2] or 'default'}_{ci:02d}".replace("+", "_")
            jobs.append(("phrase", vi * 100 + ci, voice, (name, cmd, 0), split))
    # "Other speakers": the non-espeak test voices pitched up and down.
    k = 10_000
    for voice in [v for v in voices if v[0] in ("festival", "flite")]:
        for cents in (-300, 300):
            for ci, cmd in enumerate(texts.TEST_COMMANDS):
                name = f"{voice[0]}_{voice[1]}_pitch{cents:+d}_{ci:02d}"
                jobs.append(("phrase", k, voice, (name, cmd, cents), split))
                k += 1
    # Negatives in 5-minute files, by default 2.83 hours: 24 speech, 6 speech over music,
    # 4 noise and music alone. WAKE_NEG_HOURS asks for more in the same proportions; the
    # first files stay the same (seeds by kind and number), so old figures are a subset.
    # Fewer hours write fewer files but delete none: wake_eval measures all it finds.
    hours = float(os.environ.get("WAKE_NEG_HOURS", "0"))
    counts = dict(FIRST_NEG)
    if hours > 0:
        n = max(1, int(np.ceil(hours * 12)))
        first = sum(FIRST_NEG.values())
        counts["speech"] = round(n * FIRST_NEG["speech"] / first)
        counts["tv"] = round(n * FIRST_NEG["tv"] / first)
        counts["noise"] = n - counts["speech"] - counts["tv"]
    neg = []
    for i in range(counts["speech"]):
        neg.append(("speech", i, voices[i % len(voices)], None, split))
    for i in range(counts["tv"]):
        neg.append(("tv", i, voices[(i * 5 + 2) % len(voices)], None, split))
    for i in range(counts["noise"]):
        neg.append(("noise", i, voices[0], None, split))
    # The first set first, then the rest with the kinds interleaved, so a run stopped
    # early still has them in proportion.
    neg.sort(key=lambda j: (j[1] >= FIRST_NEG[j[0]], j[1] / counts[j[0]]))
    jobs += neg
    with Pool(workers) as pool:
        for n, _ in enumerate(pool.imap_unordered(eval_job, jobs)):
            if n % 50 == 0:
                print(f"eval {n}/{len(jobs)}", flush=True)
    stage_tv(workers, split)


if __name__ == "__main__":
    workers = int(os.environ.get("WAKE_WORKERS", "2"))
    stage = sys.argv[1] if len(sys.argv) > 1 else "all"
    # The docstring is training text (above), so the stages are listed here; run.sh runs
    # them in order.
    stages = ("all", "tts", "feat", "noisy", "babble", "accent", "dry", "accent-babble",
              "made", "wide", "eval", "eval-dev", "eval-dev-voices", "eval-pitched",
              "eval-coloured", "eval-tempo", "eval-tv", "eval-indic", "eval-test", "eval-cross")
    common.usage(f"{__doc__}\n\nUsage: gen.py [STAGE] (default all), STAGE one of "
                 f"{', '.join(stages)}; run.sh runs them in order.",
                 stage in stages + ("harvest",) and len(sys.argv) <= (3 if stage == "harvest" else 2))
    if stage == "harvest":  # texts._fresh's: the text as this script's own state makes it
        json.dump(getattr(texts, sys.argv[2])(), sys.stdout)
        sys.exit(0)
    if stage in ("tts", "all"):
        stage_tts(workers)
    if stage in ("feat", "all"):
        stage_feat(workers, int(os.environ.get("WAKE_TRAIN_SHARDS", "150")),
                   int(os.environ.get("WAKE_DEV_SHARDS", "10")))
    if stage in ("noisy", "all"):
        stage_feat_mixed(workers, "noisy", int(os.environ.get("WAKE_NOISY_SHARDS", "30")))
    if stage in ("babble", "all"):
        stage_feat_mixed(workers, "babble", int(os.environ.get("WAKE_BABBLE_SHARDS", "30")))
    # Not part of "all": round 6's extra voices (run.sh).
    if stage == "accent":
        stage_tts(workers, ACCENT_COUNTS)
        stage_feat_mixed(workers, "accent", int(os.environ.get("WAKE_ACCENT_SHARDS", "20")))
    # Not part of "all" either: round 8's clips in no room (after "accent").
    if stage == "dry":
        stage_feat_mixed(workers, "dry", int(os.environ.get("WAKE_DRY_SHARDS", "20")))
    # Not part of "all" either: round 15's festival voices over babble (after "accent").
    if stage == "accent-babble":
        stage_feat_mixed(workers, "accbabble", int(os.environ.get("WAKE_ACCBABBLE_SHARDS", "20")))
    # Not part of "all" either: round 9's made-up espeak-ng speakers (after "dry").
    if stage == "made":
        stage_voices()
        stage_tts(workers, MADE_COUNTS)
        stage_feat_mixed(workers, "made", int(os.environ.get("WAKE_MADE_SHARDS", "30")))
    # Not part of "all" either: round 20's made-up speakers, their spectrum reshaped.
    if stage == "wide":
        stage_voices(wide=True)
        stage_tts(workers, WIDE_COUNTS)
        stage_feat_mixed(workers, "wide", 30)
    if stage in ("eval-dev", "eval", "all"):
        stage_eval(workers, "dev")
    # Not part of "all": more dev negatives, every dev voice reading text of its own
    # (calibrate.py reads them when WAKE_DEV_NEGATIVES names "voices").
    if stage == "eval-dev-voices":
        stage_dev_voices(workers)
    # Not part of "all": the dev and test phrases at other vocal tract lengths (round 12).
    if stage == "eval-pitched":
        stage_pitched(workers, "dev")
        stage_pitched(workers, "test")
    # Not part of "all": the dev and test phrases through other frequency responses.
    if stage == "eval-coloured":
        stage_coloured(workers, "dev")
        stage_coloured(workers, "test")
    # Not part of "all": the dev and test phrases at other speaking rates.
    if stage == "eval-tempo":
        stage_tempo(workers, "dev")
        stage_tempo(workers, "test")
    # Part of eval-dev and eval-test since 2026-12-04; alone, for sets written before.
    if stage == "eval-tv":
        stage_tv(workers, "dev")
        stage_tv(workers, "test")
    # Not part of "all": festival's Hindi, Marathi and Telugu voices, held out.
    if stage == "eval-indic":
        stage_indic(workers)
    # Not part of "all": the voices and texts of the dev and held-out negatives crossed.
    if stage == "eval-cross":
        stage_cross(workers)
    # "eval-test": the held-out set alone, e.g. to lengthen its negatives (WAKE_NEG_HOURS).
    if stage in ("eval", "eval-test", "all"):
        stage_eval(workers, "test")
