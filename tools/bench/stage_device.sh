#!/usr/bin/env bash
# Build a bundle for the GPU machine (it has no Rust): the release `stapes` CLI and the named
# integration-test binaries, stripped, as dist/NAME.tar.xz (dist/ is not in git). On the device:
# `tar -xJf dist/NAME.tar.xz -C /tmp/x`, then /tmp/x/NAME/stapes and /tmp/x/NAME/<test>
# (run tests with --test-threads=1: the GPU tests share one device). The real clips the family
# tests read (`$STAPES_CACHE/audio`, ~2 MB, from scripts/fetch-models.sh) come along as
# /tmp/x/NAME/audio: copy that folder into the device's STAPES_CACHE before the tests.
#
#   tools/bench/stage_device.sh v91 "cuda_parakeet conformer_ops"
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?usage: stage_device.sh NAME "test binaries"}
tests=${2:-}
out=dist/$name/b
rm -rf "dist/$name"
mkdir -p "$out"
cargo build --release -p stapes-cli
cp target/release/stapes "$out/stapes"
for t in $tests; do
  # the family tests live in the `stapes` crate, the backend's own in `stapes-cuda`
  if [ -f "crates/stapes/tests/$t.rs" ]; then p=stapes; else p=stapes-cuda; fi
  cargo test --release -p "$p" --test "$t" --no-run --message-format=json 2>/dev/null |
    tools/bench/copy_test_bins.py "$out" "$t"
done
cache=${STAPES_CACHE:-$HOME/.cache/stapes}
if [ -d "$cache/audio" ]; then cp -r "$cache/audio" "$out/audio"; else echo "stage_device: no $cache/audio (the family tests will say so)" >&2; fi
git rev-parse --short HEAD > "$out/COMMIT"
git diff --quiet || echo "dirty" >> "$out/COMMIT"
for f in "$out"/*; do if [ -f "$f" ]; then strip "$f" 2>/dev/null || true; fi; done
tmp=$(mktemp -d)
cp -r "$out" "$tmp/$name"
tar -C "$tmp" -cf - "$name" | xz -6 -T2 > "dist/$name.tar.xz"
rm -rf "$tmp"
ls -la "dist/$name.tar.xz"
