#!/usr/bin/env bash
# Stop 15 call e3: FastConformer switches never measured for speed (FC_SUB, LN_PAIR, REL_ATTN_KS, LN_Q8), same binary.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/scache-e1 B=/tmp/b-e1
mkdir -p $B $STAPES_CACHE
[ -x $B/stapes ] || { tar -xJf dist/e1/bins.tar.xz -C $B && tar -xJf dist/e1/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/d9/audio.tar.xz -C $STAPES_CACHE; }
date -u
bench() { # tag model lane batch
  $B/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 20 --batch $4 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$1 $2 $3 b$4"; }
for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do
  bench base $m f16 0
  STAPES_CUDA_FC_SUB=1 bench fc_sub $m f16 0
  STAPES_CUDA_LN_PAIR=1 bench ln_pair $m f16 0
  STAPES_CUDA_REL_ATTN_KS=auto bench ks_auto $m f16 0
  STAPES_CUDA_REL_ATTN_KS=1 bench ks_1 $m f16 0
  STAPES_CUDA_FC_SUB=1 STAPES_CUDA_LN_PAIR=1 STAPES_CUDA_REL_ATTN_KS=auto bench all $m f16 0
  bench base $m f16 0
  bench base $m q8 0
  STAPES_CUDA_FC_SUB=1 STAPES_CUDA_LN_PAIR=1 STAPES_CUDA_REL_ATTN_KS=auto bench all $m q8 0
  STAPES_CUDA_FC_SUB=1 STAPES_CUDA_LN_PAIR=1 STAPES_CUDA_REL_ATTN_KS=auto STAPES_CUDA_LN_Q8=1 bench all+lnq8 $m q8 0
done
m=parakeet-tdt-0.6b-v2
bench base $m f16 16
STAPES_CUDA_FC_SUB=1 STAPES_CUDA_LN_PAIR=1 STAPES_CUDA_REL_ATTN_KS=auto bench all $m f16 16
date -u
