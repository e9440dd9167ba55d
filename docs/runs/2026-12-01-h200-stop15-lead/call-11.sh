#!/usr/bin/env bash
# Stop 15 call 11: cuBLASLt candidates timed at a shape's first use, 8 (default) vs 32, fresh algorithm caches.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
mkdir -p /tmp/g1 && xz -dc dist/g1/stapes.xz > /tmp/g1/stapes && chmod +x /tmp/g1/stapes
mkdir -p /tmp/base-cache && tar -xJf dist/f1/cache.tar.xz -C /tmp/base-cache && tar -xJf dist/d9/audio.tar.xz -C /tmp/base-cache
date -u
for n in 8 32 8 32; do
  rm -rf /tmp/c$n && cp -r /tmp/base-cache /tmp/c$n
  for m in whisper-large-v3-turbo whisper-tiny whisper-base parakeet-tdt-0.6b-v2 canary-1b-flash; do
    STAPES_CACHE=/tmp/c$n STAPES_CUDA_LT_CANDIDATES=$n /tmp/g1/stapes bench --synthetic $m --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 16 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v and ("encode" in k)})' "cand=$n $m"
  done
done
date -u
