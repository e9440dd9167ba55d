#!/usr/bin/env bash
# Stop 33 call 7: the review mend (5257bfd = v58: Selected::best_ids, TimestampRules::whisper)
# on the GPU: select (with the feed checks) and cuda_whisper (real tiny.en, steps ahead).
# Carry dist/v58 dist/au2 dist/tiny.bin.xz dist/run33.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b58
mkdir -p $B $STAPES_CACHE
date -u
tar -xJf dist/v58/bins.tar.xz -C $B && tar -xJf dist/v58/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE && mkdir -p /tmp/m && xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
for x in select cuda_whisper; do timeout 120 $B/$x --test-threads=1 2>&1 | grep -E "^test |test result"; done
date -u
