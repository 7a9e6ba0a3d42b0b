#!/usr/bin/env bash
# Builds the browser half into target/site: the app compiled to WASM with the
# `hydrate` feature, its JS glue (wasm-bindgen), the stylesheet and public/.
# `cargo leptos build` does the same where cargo-leptos is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-debug}
site=target/site
# A build directory of its own (cargo locks one per build): the WASM build
# can run while the server builds (scripts/test.sh does), and the two share
# no artifacts anyway, their features differ.
build_dir=target/wasm
if [ "$profile" = release ]; then
  cargo build -p app --lib --target wasm32-unknown-unknown --no-default-features --features hydrate --profile wasm-release --target-dir "$build_dir"
  wasm=$build_dir/wasm32-unknown-unknown/wasm-release/app.wasm
else
  cargo build -p app --lib --target wasm32-unknown-unknown --no-default-features --features hydrate --target-dir "$build_dir"
  wasm=$build_dir/wasm32-unknown-unknown/debug/app.wasm
fi
mkdir -p "$site/pkg"
strip=()
# Release bundles drop the names section (debug symbol names, ~4 MB).
[ "$profile" = release ] && strip=(--remove-name-section --remove-producers-section)
wasm-bindgen --target web --no-typescript "${strip[@]}" --out-dir "$site/pkg" --out-name docflow "$wasm"
if [ "$profile" = release ] && command -v wasm-opt >/dev/null && wasm-opt --version | grep -qE 'version (1[2-9][0-9])'; then
  wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int -o "$site/pkg/docflow_bg.wasm" "$site/pkg/docflow_bg.wasm"
fi
cp style/main.css "$site/pkg/docflow.css"
cp -r public/. "$site/"
# Compressed once here, served as they are (the server's ServeDir picks the
# .br or .gz its visitor accepts) instead of compressed again for every
# visitor: brotli at its best for a release, quicker for the tests' bundle.
quality=5
[ "$profile" = release ] && quality=11
for f in "$site"/pkg/*.wasm "$site"/pkg/*.js "$site"/pkg/*.css; do
  gzip -9 -k -f "$f"
  if command -v brotli >/dev/null; then
    brotli -q "$quality" -k -f "$f"
  fi
done
