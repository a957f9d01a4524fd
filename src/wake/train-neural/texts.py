"""What the synthetic voices say. Training and test use different commands and
different ordinary text (training: Python's own documentation strings; test: the
licence texts Debian ships and tests/wake/other_speech.txt, and for longer test sets the
Perl manuals' prose), so the test measures
speech the model never heard. The dev voices' own negatives (gen.py eval-dev-voices)
read a third text, Python's reference manual and the docstrings training leaves out."""

import json
import os
import pydoc
import re
import random
import subprocess
import sys

from common import REPO

PHRASES = ["hey strawberry", "hey, strawberry", "Hey Strawberry!", "hey strawberry.",
           "hey strawberry?", "Hey strawberry,"]

TRAIN_COMMANDS = [
    "turn on the kitchen lights", "what time is it", "set a timer for ten minutes",
    "play some music", "what's the weather like", "turn off the radio",
    "how warm is it outside", "add milk to the shopping list", "stop", "good night",
    "open the garage door", "what's on my calendar today", "call mum",
    "how long until the bus comes", "dim the bedroom lights", "is it going to rain",
    "set an alarm for seven", "what's two plus two", "turn the heating up",
    "tell me a joke", "pause", "next song", "read me the news", "lock the front door",
    "how many grams in a pound", "remind me to water the plants", "volume down",
    "what day is it", "switch off everything", "start the washing machine",
]
TEST_COMMANDS = [
    "what is the weather like tomorrow", "turn off the living room lights",
    "set a timer for twenty minutes", "play the radio", "what time is sunset",
    "is the back door locked", "turn the music down", "how cold is it in the attic",
    "add eggs to the list", "when is my next meeting", "close the blinds",
    "start the coffee machine", "what's the temperature in the bathroom",
    "switch on the fan", "remind me to call the dentist", "good morning",
]

# What the Hindi, Marathi and Telugu voices (common.INDIC_FESTIVAL) say after the phrase:
# TEST_COMMANDS' kind of command, in their own language.
INDIC_COMMANDS = {
    "hindi_NSK_diphone": [
        "कल मौसम कैसा रहेगा", "बैठक की बत्तियाँ बंद करो", "बीस मिनट का टाइमर लगाओ",
        "रेडियो चलाओ", "आज सूरज कब डूबेगा", "क्या पीछे का दरवाज़ा बंद है", "गाना धीमा करो",
        "ऊपर के कमरे में कितनी ठंड है", "सूची में अंडे जोड़ो", "मेरी अगली बैठक कब है",
        "पर्दे बंद करो", "कॉफ़ी मशीन चालू करो", "बाथरूम का तापमान क्या है", "पंखा चलाओ",
        "मुझे डॉक्टर को फ़ोन करना याद दिलाना", "सुप्रभात",
    ],
    "marathi_NSK_diphone": [
        "उद्या हवामान कसे असेल", "दिवाणखान्यातले दिवे बंद कर", "वीस मिनिटांचा टायमर लाव",
        "रेडिओ लाव", "आज सूर्यास्त किती वाजता आहे", "मागचे दार बंद आहे का", "गाणे हळू कर",
        "माळ्यावर किती थंडी आहे", "यादीत अंडी जोड", "माझी पुढची बैठक कधी आहे",
        "पडदे बंद कर", "कॉफी मशीन सुरू कर", "न्हाणीघरात तापमान किती आहे", "पंखा सुरू कर",
        "मला डॉक्टरांना फोन करायची आठवण करून दे", "सुप्रभात",
    ],
    "telugu_NSK_diphone": [
        "రేపు వాతావరణం ఎలా ఉంటుంది", "హాల్లో లైట్లు ఆపు", "ఇరవై నిమిషాల టైమర్ పెట్టు",
        "రేడియో పెట్టు", "ఈ రోజు సూర్యాస్తమయం ఎప్పుడు", "వెనక తలుపు వేసి ఉందా",
        "పాట సౌండ్ తగ్గించు", "పై గదిలో ఎంత చలిగా ఉంది", "లిస్ట్‌లో గుడ్లు చేర్చు",
        "నా తర్వాతి మీటింగ్ ఎప్పుడు", "కర్టెన్లు మూసెయ్", "కాఫీ మెషిన్ ఆన్ చెయ్",
        "బాత్రూంలో ఉష్ణోగ్రత ఎంత", "ఫ్యాన్ వెయ్", "డాక్టర్‌కి ఫోన్ చేయమని గుర్తు చెయ్",
        "శుభోదయం",
    ],
}

# The phrase and near-misses respelled for festival's Czech and Catalan voices (common.
# TRAIN_FESTIVAL), whose rules would read English spelling as something else.
ACCENT_PHRASES = ["Hei stroberi", "Hei, stroberi!", "hei stroberi.", "Hei stroberi?",
                  "Hej stroberi", "Hei strouberi"]
ACCENT_CONFUSABLES = ["hei", "hei tam", "stroberi", "stroberis", "hei stroberis",
                      "hei strou", "hei stori", "hei berri", "hei rezberi", "hei bluberi",
                      "hei strejndžr", "sej stroberi", "strou beri", "hei Siri", "hei Gugl",
                      "stroberi džem", "hei Jarvis", "hei Sali", "hei Teri"]

# Negatives that share sounds or parts with the phrase.
CONFUSABLES = [
    "hey", "hey there", "hey you", "strawberry", "strawberries", "strawberry jam",
    "a strawberry", "the strawberry", "wild strawberry", "hey Siri", "hey Google",
    "okay Google", "Alexa", "hey Jarvis", "hay straw bury", "hey, straw", "hey straw",
    "hey story", "hey stranger", "hey Sally", "hey Barry", "hey Terry", "hey Jerry",
    "hey raspberry", "hey blueberry", "hey strawman", "hey strong boy", "straw hat",
    "blueberry", "raspberry", "say strawberry", "they saw Barry", "hay is for horses",
    "the stray dog buried it", "straw berry", "stray bear", "a tray of berries",
    "hey, strawberries are in season", "I love strawberry ice cream",
    "we picked strawberries yesterday", "strawberry fields forever",
    "pass the strawberry yoghurt", "hey, what's up", "hey, can you help me",
    "they stored the berries", "Hey Straub, very good", "hey strata", "heyday",
    "Strasbourg", "hey Mister Berry", "a day of straw and berries",
]


def _sentences(text):
    text = re.sub(r"\s+", " ", text)
    out = []
    for s in re.split(r"(?<=[.!?])\s+", text):
        s = s.strip()
        words = s.split()
        if not 4 <= len(words) <= 28:
            continue
        if not re.fullmatch(r"[A-Za-z0-9 ,.;:'!?()-]+", s):
            continue
        if re.search(r"hey[^a-z]*straw", s, re.I):
            continue
        out.append(s)
    return out


def _stdlib_modules():
    import sys
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in {"antigravity", "this", "idlelib", "turtledemo",
                                           "tkinter", "turtle"}:
            continue
        try:
            yield __import__(name)
        except Exception:
            continue


_FRESH = {}


def _fresh(harvest):
    """What the function `harvest` returns in a new `gen.py harvest` process, once per
    process. The harvests read what the standard library's modules list, which depends on
    what the process imported before (a package lists the submodules imported so far);
    harvested in place, the text and its shuffled order changed with what the process had
    done, so the dev set's negatives and babble that `gen.py all` wrote differed from those
    `gen.py eval-dev` wrote. A new gen.py process is the state gen.py's first harvest, the
    training paragraphs', was always made in, rlcompleter's `__main__` (gen.py) and its
    docstring included."""
    if harvest not in _FRESH:
        gen = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen.py")
        r = subprocess.run([sys.executable, gen, "harvest", harvest], capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0:
            sys.exit(f"texts.py: `gen.py harvest {harvest}` failed (exit {r.returncode}); "
                     f"its last output:\n{r.stderr[-2000:]}")
        _FRESH[harvest] = json.loads(r.stdout)
    return list(_FRESH[harvest])


def train_sentences():
    """Ordinary English from Python's standard library documentation strings."""
    return _fresh("harvest_train_sentences")


def harvest_train_sentences():
    """train_sentences() as this process's imports make it."""
    text = []
    for mod in _stdlib_modules():
        for obj in [mod] + [getattr(mod, a, None) for a in dir(mod)[:80]]:
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str):
                text.append(doc)
    sents = sorted(set(_sentences(" ".join(text))))
    random.Random(1).shuffle(sents)
    return sents


def dev_sentences():
    """Ordinary English no model trained on and the test set does not read, for the dev
    voices' negatives: Python's reference manual (pydoc_data) and the docstrings
    train_sentences() leaves out (a module's attributes past its 80th, classes' methods),
    without any training or test sentence."""
    return _fresh("harvest_dev_sentences")


def harvest_dev_sentences():
    """dev_sentences() as this process's imports make it."""
    import inspect
    import pydoc_data.topics
    seen = set(train_sentences()) | set(test_sentences()) | set(more_test_sentences())
    text = list(pydoc_data.topics.topics.values())
    for mod in _stdlib_modules():
        names = dir(mod)
        for a in names[80:]:
            doc = getattr(getattr(mod, a, None), "__doc__", None)
            if isinstance(doc, str):
                text.append(doc)
        for a in names:
            obj = getattr(mod, a, None)
            if inspect.isclass(obj):
                for m in vars(obj).values():
                    doc = getattr(m, "__doc__", None)
                    if isinstance(doc, str):
                        text.append(doc)
    sents = [s for s in sorted(set(_sentences(" ".join(text)))) if s not in seen]
    random.Random(5).shuffle(sents)
    return sents


def test_sentences():
    """Held-out ordinary English: Debian's licence texts and the wake test's own text."""
    text = []
    d = "/usr/share/common-licenses"
    for f in sorted(os.listdir(d)):
        p = os.path.join(d, f)
        if os.path.isfile(p):
            text.append(open(p, errors="ignore").read())
    text.append(open(os.path.join(REPO, "tests/wake/other_speech.txt")).read())
    sents = sorted(set(_sentences(" ".join(text))))
    random.Random(2).shuffle(sents)
    return sents


def more_test_sentences():
    """More held-out English for test negatives past the first 2.83 hours (whose ~45
    minutes of text test_sentences() already repeats): the prose of the Perl manuals
    Debian ships (perl-modules), without code or markup, and without any sentence of
    the training or first test text."""
    import glob
    text = []
    for p in sorted(glob.glob("/usr/share/perl/*/**/*.pod", recursive=True)):
        lines = open(p, errors="ignore").read().split("\n")
        # Pod commands and indented (verbatim: code) lines are not prose.
        text.append("\n".join(l for l in lines if not l.startswith((" ", "\t", "="))))
    text = re.sub(r"\([A-Z]( [a-z,]+)?\) ", "", " ".join(text))  # perldiag's "(F) " tags
    seen = set(train_sentences()) | set(test_sentences())
    sents = [s for s in sorted(set(_sentences(text))) if s not in seen]
    random.Random(4).shuffle(sents)
    return sents
