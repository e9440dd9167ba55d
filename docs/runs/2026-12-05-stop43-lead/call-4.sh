#!/usr/bin/env bash
# Stop 43 call 4: v94 = v93 with every split shape on e4m3 where its input's writer leaves it
# (no K bound: the conv module's pw2 too); v93 = K >= 2048 only (fc2); v94 with
# STAPES_CUDA_SPLIT_FP8=0 = main's form. v94's tests, then the three alternating on one tuning
# cache. Carry dist/v93.tar.xz dist/v94.tar.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/v93.tar.xz -C /tmp/x; tar -xJf dist/v94.tar.xz -C /tmp/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout 150 /tmp/x/v94/$1 --test-threads=1 --nocapture > /tmp/o/$1.log 2>&1; rc=$?
  echo "=== v94 $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/o/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|ok split" /tmp/o/$1.log | head -12; }
for b in fp8 linear_add_norms cuda_parakeet cuda_canary; do t $b; done
echo "elapsed $(el) s"
e() { # build split-fp8 model
  STAPES_CUDA_SPLIT_FP8=$2 /tmp/x/$1/stapes bench --synthetic $3 --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_device"
print(sys.argv[1], "split_fp8", sys.argv[2], sys.argv[3], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 || tail -3 /tmp/t2/e.err; }
for c in "v93 1" "v94 1" "v94 0"; do e $c parakeet-tdt-0.6b-v2 > /dev/null; e $c canary-1b-flash > /dev/null; done
for r in 1 2 3; do
  for c in "v94 0" "v93 1" "v94 1"; do e $c parakeet-tdt-0.6b-v2; done
  for c in "v94 0" "v93 1" "v94 1"; do e $c canary-1b-flash; done
  [ $(el) -lt 330 ] || break
done
echo "elapsed $(el) s"
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
