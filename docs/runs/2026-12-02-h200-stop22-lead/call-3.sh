#!/usr/bin/env bash
# Stop 22 call 3. Four FastConformer kernels reworked (build v12): fc_dw_cl walks runs of f2
# with its taps in registers (k3 s2 p1 only), the f16 act kernel takes 16-byte chunks,
# layer_norm_pair's f16 form runs a warp a row (ln_pair_rows16, each result the bits of
# layer_norm_rows16), glu_dw_act issues its staging loads together and keeps 4 outputs side by
# side. (a) the tests of every op touched; (b) A/B against v11 in the same lease, and the
# split-keys attention off for 16 clips (STAPES_CUDA_REL_ATTN_KS=0); (c) a 16-clip parakeet
# encode under ncu again.
# Stage: dist/stage2.sh v12 "fc_subsample conformer_ops ln_pair f16_activations ops cuda_parakeet
# cuda_canary parakeet_batch cuda_fc_shapes graphs pdl cuda_whisper"; carry dist/v11s dist/v12
# dist/au.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2 A=/tmp/b1
mkdir -p $B $A $STAPES_CACHE /tmp/c1 /tmp/t1 /tmp/m
tar -xJf dist/v12/bins.tar.xz -C $B && tar -xJf dist/v12/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
tar -xJf dist/v11s/bins.tar.xz -C $A && tar -xJf dist/v11s/cache.tar.xz -C /tmp/c1 && tar -xJf dist/au/audio.tar.xz -C /tmp/c1
# no real tiny.en this call: with both builds it would pass the 64 MiB carry limit
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in fc_subsample conformer_ops ln_pair f16_activations ops cuda_parakeet cuda_canary parakeet_batch cuda_fc_shapes graphs pdl cuda_whisper; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t1/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t1/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A4 /tmp/t1/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t1/$t.log $O/
done
date -u
ab() { # label bin cache model lane env...
  local label=$1 bin=$2 cache=$3 m=$4 l=$5; shift 5
  env STAPES_CACHE=$cache "$@" timeout 90 $bin bench --synthetic $m --device cuda --lane $l --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/tmp/t1/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m $l" || tail -3 /tmp/t1/err.txt
}
for rep in 1 2 3; do
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do ab v11 $A/stapes /tmp/c1 $m f16; ab v12 $B/stapes $STAPES_CACHE $m f16; done
done
ab v12-ks0 $B/stapes $STAPES_CACHE parakeet-tdt-0.6b-v2 f16 STAPES_CUDA_REL_ATTN_KS=0
ab v12-ks0 $B/stapes $STAPES_CACHE parakeet-tdt-0.6b-v2 f16 STAPES_CUDA_REL_ATTN_KS=0
for m in whisper-tiny whisper-large-v3-turbo; do ab v11 $A/stapes /tmp/c1 $m f16; ab v12 $B/stapes $STAPES_CACHE $m f16; done
date -u
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --launch-count 3000 $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 1 --batch 16 > $O/ncu-parakeet16-v12.csv 2> /tmp/ncu.err; echo "ncu rc=$?"; tail -2 /tmp/ncu.err
xz -9 $O/ncu-parakeet16-v12.csv
date -u
cd /tmp/t1 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
