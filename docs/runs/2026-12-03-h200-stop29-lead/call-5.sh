#!/usr/bin/env bash
# Stop 29 call 5: build v37 = the landed form (4 slices, K >= 1024 split by default) and
# linear_add_norms' test with a K = 1024 case. Tests, then two alternating rounds of the default
# against the composed form (STAPES_CUDA_SPLIT_LN=0): parakeet, canary. Carry dist/v37 dist/au2 dist/run29.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v37/bins.tar.xz -C $B && tar -xJf dist/v37/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
for t in linear_add_norms cuda_parakeet cuda_canary parakeet_batch cuda_fc_shapes; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 --nocapture > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$t.log | head -12; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
grep -E "^ok .*1024, 1024" /tmp/t2/linear_add_norms.log
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
run() { STAPES_CUDA_SPLIT_LN=$1 $B/stapes bench --synthetic $2 --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do echo "warm $m: $(run 4 $m)"; done
for r in 1 2; do for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do for s in 0 4; do
  echo "$m f16 split=$s round $r (encode, encode_device, 16): $(run $s $m)"
done; done; done
date -u
