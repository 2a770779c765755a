#!/bin/sh
# Runs the console's browser test (tests/console.rs, headless Chromium) and copies the
# screenshots it saves under target/ into docs/console/, for the README's "Console" section.
# CI runs the test but never changes tracked files: run this by hand and commit the PNGs.
set -eu
cd "$(dirname "$0")/../.."
cargo test -p smdb --test console
src="${CARGO_TARGET_DIR:-target}/tmp/console"
for f in machines machine instances instance feed server readonly; do
    cp "$src/$f.png" "docs/console/$f.png"
done
echo "copied $(ls "$src" | wc -l) screenshots into docs/console/"
