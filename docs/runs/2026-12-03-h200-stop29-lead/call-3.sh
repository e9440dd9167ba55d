#!/usr/bin/env bash
# Stop 29 call 3: build v35 = call 2's v34 with splitk_add_ln16 as a block a row (every load issued first, block sums for the norms; v34: a warp a row, its partial-sum loads in a loop: 7.3-9.9 us under ncu). v34 was main + Backend::linear_add_norms, whose CUDA split form (<= 512
# rows, K >= 2048, in f16 chains) runs the GEMM's K slices as one strided-batched cuBLAS GEMM
# into f32 partials and then one kernel (splitk_add_ln16) for their sum, bias, residual and the
# norm(s) after it: FastConformer's fc2 + norm and fc2 + closing pair. Tests, then an A/B in one
# binary on one tuning cache (STAPES_CUDA_SPLIT_LN=0 composed, 2, 4 slices), alternating three
# rounds: parakeet one 11 s clip on the device and 16 clips, canary; then ncu of one parakeet
# encode with 2 slices. Carry dist/v35 dist/au2 dist/run29.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v35/bins.tar.xz -C $B && tar -xJf dist/v35/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for t in linear_add_norms conformer_ops cuda_parakeet cuda_canary parakeet_batch; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 --nocapture > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$t.log | head -12; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
grep -E "^ok " /tmp/t2/linear_add_norms.log | head -60
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
run() { STAPES_CUDA_SPLIT_LN=$1 $B/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
M="parakeet-tdt-0.6b-v2 canary-1b-flash"
for m in $M; do echo "warm $m: $(run 2 $m f16) / $(run 0 $m f16)"; done
for r in 1 2 3; do
  for m in $M; do
    for s in 0 2 4; do
      echo "$m f16 split=$s round $r (encode, encode_device, 16): $(run $s $m f16)"
    done
  done
done
for m in $M; do for s in 0 2; do echo "$m q8 split=$s (encode, encode_device, 16): $(run $s $m q8)"; done; done
date -u
STAPES_CUDA_SPLIT_LN=2 timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size --csv --kernel-name regex:"splitk_add_ln16|nvjet_sm90_hss|layer_norm_rows16" --launch-count 200 \
  $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --audio samples/jfk.wav --iters 1 --decode-tokens 2 > $O/ncu-parakeet-split2.csv 2>/tmp/t2/ncu.err; echo "ncu rc=$?"; tail -2 /tmp/t2/ncu.err
xz -9 $O/ncu-parakeet-split2.csv
date -u
