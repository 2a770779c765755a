#!/bin/sh
# Runs the console's browser tests (tests/console.rs and tests/console_cluster.rs, headless
# Chromium; the second starts etcd and three cluster groups) and copies the
# screenshots they save under target/ into docs/console/, for the README's "Console" section.
# CI runs the test but never changes tracked files: run this by hand and commit the PNGs.
set -eu
cd "$(dirname "$0")/../.."
cargo test -p smdb --test console --test console_cluster
src="${CARGO_TARGET_DIR:-target}/tmp/console"
for f in machines machine instances instance feed server readonly cluster; do
    cp "$src/$f.png" "docs/console/$f.png"
done
echo "copied $(ls "$src" | wc -l) screenshots into docs/console/"
