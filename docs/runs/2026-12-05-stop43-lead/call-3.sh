#!/usr/bin/env bash
# Stop 43 call 3 (v93 = d3a3c59 + the split form's e4m3 partial products for q8 weights with
# K >= 2048, default on; v91 = main d3a3c59). v93's tests (fp8 with the new split test,
# linear_add_norms, cuda_parakeet, cuda_canary), then v91 / v93 alternating on one tuning
# cache, and v93 in 2 slices. Carry dist/v91.tar.xz dist/v93.tar.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/v91.tar.xz -C /tmp/x; tar -xJf dist/v93.tar.xz -C /tmp/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout 150 /tmp/x/v93/$1 --test-threads=1 --nocapture > /tmp/o/$1.log 2>&1; rc=$?
  echo "=== v93 $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/o/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|ok split" /tmp/o/$1.log | head -12; }
for b in fp8 linear_add_norms cuda_parakeet cuda_canary; do t $b; done
echo "elapsed $(el) s"
e() { # build model lane batch [slices]
  STAPES_CUDA_SPLIT_LN=${5:-4} /tmp/x/$1/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 20 --batch $4 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; b=sys.argv[4]
k="encode_batched" if b!="1" else "encode_device"
print(sys.argv[1], sys.argv[2], sys.argv[3], "batch", b, "slices", sys.argv[5], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 $4 ${5:-4} || tail -3 /tmp/t2/e.err; }
for v in v91 v93; do e $v parakeet-tdt-0.6b-v2 q8 1 > /dev/null; e $v canary-1b-flash q8 1 > /dev/null; done
e v93 parakeet-tdt-0.6b-v2 q8 1 2 > /dev/null
for r in 1 2 3; do
  for v in v91 v93; do e $v parakeet-tdt-0.6b-v2 q8 1; done; e v93 parakeet-tdt-0.6b-v2 q8 1 2
  for v in v91 v93; do e $v canary-1b-flash q8 1; done
  [ $(el) -lt 400 ] || continue
  [ $r -le 2 ] && for v in v91 v93; do e $v parakeet-tdt-0.6b-v2 q8 16; done
done
echo "elapsed $(el) s"
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
