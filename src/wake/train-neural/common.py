"""Shared pieces of the neural wake word pipeline: paths, the feature front end (which
src/wake/neural.rs reproduces; tests/wake.rs compares the two on a fixed clip), and the
voice lists with their train / dev / test split.
"""

import os
import re

import numpy as np

SR = 16000
WIN = 400  # 25 ms analysis window
HOP = 160  # 10 ms between feature frames
NFFT = 512
NMELS = 40
FMIN = 60.0
FMAX = 7600.0
LOG_EPS = 1e-6

CACHE = os.environ.get(
    "WAKE_CACHE", os.path.expanduser("~/.cache/strawberry/wake/neural")
)
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def usage(doc, fits=True):
    """A script's answer to -h or --help (its docstring, the usage), and to arguments that
    do not fit it: the usage and exit status 2, not a traceback minutes into a run or a
    run that ignores what it was asked (train.py reads only its environment)."""
    import sys
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(doc)
        sys.exit(0)
    if not fits:
        print(f"{os.path.basename(sys.argv[0])}: the arguments {sys.argv[1:]} do not fit "
              f"its usage:\n{doc}", file=sys.stderr)
        sys.exit(2)


def hz_to_mel(f):
    return 2595.0 * np.log10(1.0 + f / 700.0)


def mel_to_hz(m):
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


def mel_filterbank():
    """HTK-style triangles over the power spectrum; computed in f64, used in f32."""
    mels = np.linspace(hz_to_mel(FMIN), hz_to_mel(FMAX), NMELS + 2)
    hz = mel_to_hz(mels)
    bins = np.arange(NFFT // 2 + 1) * SR / NFFT
    fb = np.zeros((NMELS, NFFT // 2 + 1))
    for m in range(NMELS):
        lo, c, hi = hz[m], hz[m + 1], hz[m + 2]
        up = (bins - lo) / (c - lo)
        down = (hi - bins) / (hi - c)
        fb[m] = np.maximum(0.0, np.minimum(up, down))
    return fb.astype(np.float32)


_FB = mel_filterbank()
_HANN = (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(WIN) / WIN)).astype(np.float32)


def features(x):
    """Log-mel frames of a 16 kHz mono float clip: frame t covers samples
    [t*HOP, t*HOP+WIN). Returns [frames, NMELS] float32."""
    x = np.asarray(x, dtype=np.float32)
    n = 1 + (len(x) - WIN) // HOP if len(x) >= WIN else 0
    if n == 0:
        return np.zeros((0, NMELS), np.float32)
    idx = np.arange(WIN)[None, :] + HOP * np.arange(n)[:, None]
    frames = x[idx] * _HANN[None, :]
    spec = np.fft.rfft(frames, n=NFFT, axis=1)
    power = (spec.real.astype(np.float32) ** 2 + spec.imag.astype(np.float32) ** 2)
    mel = power @ _FB.T
    return np.log(mel + np.float32(LOG_EPS)).astype(np.float32)


def normalise(feats, mean, std, running=None):
    """Log-mel frames [..., frames, NMELS] as a network hears them: less its mean, over its
    std. With `running` (a header's `running_mean`, round 22 on) the mean subtracted is each
    band's exponential average up to and including the frame (`running` its weight per
    frame), started at the file's mean: what a band carries steadily (a microphone's or a
    room's colouring, a voice's own spectral shape) is taken away, as cepstral mean
    normalisation and PCEN do. src/wake/neural.rs runs the same recursion frame by frame."""
    if running is None:
        return (feats - mean) / std
    from scipy.signal import lfilter
    a = float(running)
    zi = np.broadcast_to((1 - a) * mean, feats.shape[:-2] + (1, NMELS))
    avg, _ = lfilter([a], [1.0, a - 1.0], feats, axis=-2, zi=zi)
    return ((feats - avg) / std).astype(np.float32)


# ---------------------------------------------------------------- voices and splits

# espeak-ng's English voices and, speaking English with their own accent, voices of
# other languages written in the Latin alphabet.
ESPEAK_NG_EN = [
    "en-gb", "en-us", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd", "en-029",
    "en-gb-scotland", "en-us-nyc",
]
ESPEAK_NG_OTHER = [
    "de", "fr-fr", "es", "it", "nl", "pl", "pt", "sv", "da", "nb", "fi", "cs", "hu",
    "ro", "af", "id", "sw", "tr", "hr", "sk",
]
ESPEAK_OLD = ["en", "en-us", "en-n", "en-rp", "en-wm", "en-wi", "en-sc"]

# Held out for the test set, never trained on or tuned with: the whole festival
# engine, flite's rms, espeak-ng's Scottish and New York voices, espeak's Scottish one,
# and these variants in every language (every voice tests/wake.rs says a phrase in; its
# other speech is also read by en-029+f4, a dev variant).
TEST_LANGS = {"en-gb-scotland", "en-us-nyc", "en-sc"}
TEST_VARIANTS = {"m7", "f3", "m1", "m4", "Annie", "Andy", "grandma", "Lee", "whisperf"}
TEST_FLITE = {"rms"}
# The dev split (choosing the epoch and operating points): these variants.
DEV_VARIANTS = {"m2", "f4", "klatt3", "Alicia", "steph2", "Denis", "anika"}
# Other engines' timing on the dev recordings (from round 4): espeak voices end a
# phrase and let the score fall differently from flite and festival, and a dev set of
# espeak voices alone chose a persistence rule other engines' phrases miss. Every
# festival voice and flite's rms are held out, so these are flite's training voices:
# their dev recordings (training commands and text, rooms and pitch shifts of their
# own) show the timing, while their detection rates are optimistic.
DEV_FLITE = ["kal", "kal16", "awb", "slt"]
# Festival's voices of other languages speaking English with their accent (round 5 on):
# speakers and a synthesis no round trained on, so unlike flite's their scores fall as
# an unseen voice's would. Their own letter-to-sound rules need the phrase respelled;
# Whisper base reads these as "hey strawberry" or "a strawberry" (the Italian voices
# drop the h). The held-out festival voices are festival's English ones.
DEV_FESTIVAL = ["hy_fi_mv_diphone", "suo_fi_lj_diphone", "lp_diphone", "pc_diphone",
                "czech_machac"]
DEV_FESTIVAL_PHRASE = "Hei stroberi"
# Festival's remaining other-language voices, speaking in training from round 6 on (gen.py
# accent): the quiet room's misses were festival's and flite's unseen voices, whose
# synthesis (diphones, HTS) no espeak voice sounds like, and Debian main has no English
# voices left to train on. These speak the respelled phrase, and English text with their
# own letter-to-sound rules. So from round 6 festival is a trained engine: its English
# voices (the test set's) stay held-out speakers, and the dev voices above stay unseen.
# Festival's Russian voice reads only Cyrillic, so it is left out.
TRAIN_FESTIVAL = ["czech_dita", "czech_krb", "czech_ph", "upc_ca_ona_hts"]
# Festival's Hindi, Marathi and Telugu voices (packages festvox-hi-nsk, festvox-mr-nsk,
# festvox-te-nsk: one speaker's diphones in three languages), which no split trains or tunes
# on: held out and measured only (gen.py eval-indic; BENCHMARKS.md, "An Indian speaker's
# voices"), an accent and voices no other split has. Each says the phrase respelled in its
# script (Whisper base reads each as "Hey strawberry!"), and commands in its own language
# (texts.INDIC_COMMANDS), as a household speaking its own language would.
INDIC_FESTIVAL = {"hindi_NSK_diphone": "हेय् स्ट्रॉबेरी", "marathi_NSK_diphone": "हेय् स्ट्रॉबेरी",
                  "telugu_NSK_diphone": "హేయ్ స్ట్రాబెర్రీ"}
# Round 9's made-up espeak-ng speakers (gen.py made): variant files of random pitch,
# vocal tract (every formant scaled together, then each a little on its own), breath,
# roughness and synthesis mode, under a private copy of espeak-ng's data. The dev and test
# variants are real files of espeak-ng's; these are named "made" and a number.
MADE_VARIANTS = 200
MADE_DATA = os.path.join(CACHE, "espeak")
# Round 20's made-up speakers (gen.py wide): as round 9's, with the spectrum reshaped the
# way espeak-ng's own variants reshape it (formants moved one by one, one or two moved
# far, a tone curve), under a second private copy: espeak-ng lists at most 349 voices.
WIDE_VARIANTS = 200
WIDE_DATA = os.path.join(CACHE, "espeak-wide")


def espeak_ng_data():
    for d in ["/usr/lib/x86_64-linux-gnu/espeak-ng-data",
              "/usr/lib/aarch64-linux-gnu/espeak-ng-data", "/usr/share/espeak-ng-data"]:
        if os.path.isdir(os.path.join(d, "voices", "!v")):
            return d
    raise SystemExit("espeak-ng's data not found: apt-get install espeak-ng")


def espeak_ng_variants():
    d = os.path.join(espeak_ng_data(), "voices", "!v")
    return sorted(v for v in os.listdir(d) if re.fullmatch(r"[A-Za-z0-9]+", v))


def espeak_old_variants():
    for d in ["/usr/lib/x86_64-linux-gnu/espeak-data/voices/!v",
              "/usr/lib/aarch64-linux-gnu/espeak-data/voices/!v"]:
        if os.path.isdir(d):
            return sorted(v for v in os.listdir(d) if re.fullmatch(r"[A-Za-z0-9]+", v))
    return []


def split_of(engine, voice, variant):
    if is_made(variant):
        return variant[:4]
    if engine == "festival":
        return "accent" if voice in TRAIN_FESTIVAL else "test"
    if engine == "flite":
        return "test" if voice in TEST_FLITE else "train"
    if voice in TEST_LANGS or variant in TEST_VARIANTS:
        return "test"
    if variant in DEV_VARIANTS:
        return "dev"
    return "train"


def all_voices():
    """(engine, voice, variant) for every voice this machine's packages offer, and rounds
    9's and 20's made-up espeak-ng variants once gen.py made and wide have written them."""
    out = []
    ng = espeak_ng_variants()
    for lang in ESPEAK_NG_EN + ESPEAK_NG_OTHER:
        out.append(("espeak-ng", lang, ""))
        for v in ng:
            out.append(("espeak-ng", lang, v))
    for lang in ESPEAK_OLD:
        out.append(("espeak", lang, ""))
        for v in espeak_old_variants():
            out.append(("espeak", lang, v))
    for v in ["kal", "kal16", "awb", "slt", "rms"]:
        out.append(("flite", v, ""))
    for v in ["kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts"] + TRAIN_FESTIVAL:
        out.append(("festival", v, ""))
    for data in (MADE_DATA, WIDE_DATA):
        made = os.path.join(data, "espeak-ng-data", "voices", "!v")
        if os.path.isdir(made):
            for v in sorted(f for f in os.listdir(made) if is_made(f)):
                out += [("espeak-ng", lang, v) for lang in ESPEAK_NG_EN + ESPEAK_NG_OTHER
                        if lang not in TEST_LANGS]
    return out


def is_made(variant):
    """A made-up variant: round 9's ("made") or round 20's ("wide")."""
    return re.fullmatch(r"(made|wide)[0-9]{3}", variant) is not None


def made_data(variant):
    """The private espeak-ng data that holds a made-up variant."""
    return WIDE_DATA if variant.startswith("wide") else MADE_DATA
