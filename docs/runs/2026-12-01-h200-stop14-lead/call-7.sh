#!/usr/bin/env bash
# Stop 14 call 7: the peer comparison (ours + PyTorch+graph) at the final defaults (split-keys
# attention on 128-row blocks), nothing else on the machine; then real tiny.en jfk whole process.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
exec > >(tee -a "$L") 2>&1
export STAPES_CACHE=/tmp/scache7 B=/tmp/b7
mkdir -p $B $STAPES_CACHE /tmp/cmp /tmp/m
tar -xJf dist/d7/bins.tar.xz -C $B && tar -xJf dist/d7/cache.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
STAPES=$B/stapes OUT=/tmp/cmp ITERS=20 TOOLS=dist/d7/tools bash tools/bench/gpu_compare.sh
date -u
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -1 /tmp/jfk.txt; done
tar -cJf $O/cmp.tar.xz -C /tmp cmp
date -u
