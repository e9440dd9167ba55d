#!/usr/bin/env bash
# Stop 35 call 8: gpu_compare.sh on v67 (the landed code, 4a… see README) beside PyTorch+graph,
# one lease, ITERS=10, all five models. Carry dist/v67s.tar.xz dist/au dist/tools dist/run35.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b67
mkdir -p $B $STAPES_CACHE
date -u
tar -xJf dist/v67s.tar.xz -C $B && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
mkdir -p /tmp/gc && STAPES=$B/stapes OUT=/tmp/gc ITERS=10 TOOLS=dist/tools timeout 250 bash tools/bench/gpu_compare.sh 2>&1 | tail -30
(cd /tmp/gc && tar -cJf $O/gc.tar.xz .)
date -u
