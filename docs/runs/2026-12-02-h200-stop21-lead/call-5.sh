#!/usr/bin/env bash
# Stop 21 call 5: calls 3-4 (build v7) measured every stapes encode 5-20 % slower than call 2
# (build v6) did. Same lease, same commands: v6 (graph-timed tuning for all shapes, no prefetch)
# against v7 (graph timing below 2 G multiply-adds, L1 prefetch of the norms' gamma/beta), each
# with fresh tuning (STAPES_CUDA_LT_CACHE=0) and with the saved-algorithm file as
# gpu_compare.sh runs it. Carry dist/v6 dist/v7.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
for v in v6 v7; do mkdir -p /tmp/b-$v /tmp/c-$v && tar -xJf dist/$v/bins.tar.xz -C /tmp/b-$v ./stapes && tar -xJf dist/$v/cache.tar.xz -C /tmp/c-$v; done
ab() { # label bin cache model env...
  local label=$1 b=$2 c=$3 m=$4; shift 4
  env STAPES_CACHE=$c "$@" timeout 90 $b bench --synthetic $m --device cuda --lane f16 --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m"
}
date -u
for rep in 1 2; do for m in whisper-tiny whisper-large-v3-turbo whisper-base; do
  for v in v6 v7; do
    ab "$v fresh" /tmp/b-$v/stapes /tmp/c-$v $m STAPES_CUDA_LT_CACHE=0
    ab "$v saved" /tmp/b-$v/stapes /tmp/c-$v $m
  done
done; done
date -u
