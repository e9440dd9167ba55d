#!/usr/bin/env bash
# The real tiny.en and base Whisper weights for the GPU machine, as whisper.cpp ggml files
# (`stapes convert --to ggml`, f16) that both engines read: one tar.xz (~197 MB) cut into parts
# dist/rw1/part, dist/rw2/part, … of at most PART_MB MB, with dist/rw1/sha256 of the two files.
# run's 64 MiB counts the tracked tree (~26 MB) beside the carried paths, so a part rides along
# one call each (carry dist/rwN); on the device, each call copies its part into /tmp/rw/N
# (/tmp survives between calls while the machine stays warm) and the last one joins them:
#   cat $(ls /tmp/rw/* | sort -V) | xz -dc | tar -C /tmp/m -xf - && (cd /tmp/m && sha256sum -c SUMS)
#
#   tools/bench/stage_real_weights.sh 36
set -euo pipefail
cd "$(dirname "$0")/../.."
part_mb=${1:-36}
cache=${STAPES_CACHE:-$HOME/.cache/stapes}
scripts/fetch-models.sh whisper-tiny.en whisper-base
[ -x target/release/stapes ] || cargo build --release -p stapes-cli
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in tiny.en base; do
  target/release/stapes convert --to ggml "$cache/models/whisper-$m" "$tmp/ggml-$m.bin"
done
(cd "$tmp" && sha256sum ggml-tiny.en.bin ggml-base.bin > SUMS)
tar -C "$tmp" -cf - ggml-tiny.en.bin ggml-base.bin SUMS | xz -6 -T2 > "$tmp/rw.tar.xz"
rm -rf dist/rw[0-9]*
split -b "$((part_mb * 1000 * 1000))" -d -a 2 "$tmp/rw.tar.xz" "$tmp/part."
i=1
for p in "$tmp"/part.*; do
  mkdir -p "dist/rw$i"
  mv "$p" "dist/rw$i/part"
  i=$((i + 1))
done
cp "$tmp/SUMS" dist/rw1/sha256
ls -la dist/rw*/part
