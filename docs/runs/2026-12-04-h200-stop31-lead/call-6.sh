#!/usr/bin/env bash
# Stop 31 call 6: build v48 (= f4531a7's code; later commits change comments and docs only):
# gpu_compare.sh for parakeet, canary and turbo (f16 and q8, ITERS=10) with torch_anchor.py
# beside in the same lease. Carry dist/v48 dist/f1/tools dist/run31.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE
date -u
tar -xJf dist/v48/bins.tar.xz -C $B stapes && tar -xJf dist/v48/cache.tar.xz -C $STAPES_CACHE
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/f1/tools MODELS="parakeet-tdt-0.6b-v2 canary-1b-flash whisper-large-v3-turbo" bash tools/bench/gpu_compare.sh > $O/cmp-table.txt 2>&1
cat $O/cmp-table.txt | head -40
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd - > /dev/null && rm -rf $O/cmp
date -u
