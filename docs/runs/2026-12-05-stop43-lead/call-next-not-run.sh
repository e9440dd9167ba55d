#!/usr/bin/env bash
# Prepared for the next stop (this stop's device time was spent, and every call got an H100):
# main's head on an H200 (the targets' card). Its split-K FP8 form (b85cd1c) has only run on
# H100s. Tests, then STAPES_CUDA_SPLIT_FP8 off / on alternating on the one-clip encoders, then
# every family beside PyTorch + graph (gpu_compare.sh) for the ledger's table.
# Stage first: tools/bench/stage_device.sh vNN "fp8 linear_add_norms cuda_parakeet cuda_canary
# parakeet_batch" (the bundle carries the real clips the tests read, as vNN/audio);
# cp -r ../shared/tools dist/tools. Carry dist/vNN.tar.xz dist/tools. Ask for needs_h200 only if H100s keep coming and the
# figure must be the H200's; otherwise compare within the call.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
V=${V:?the bundle name, e.g. V=v96}
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/$V.tar.xz -C /tmp/x && cp -r /tmp/x/$V/audio $STAPES_CACHE/
B=/tmp/x/$V
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout 150 $B/$1 --test-threads=1 --nocapture > /tmp/o/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/o/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|ok split" /tmp/o/$1.log | head -12; }
for b in fp8 linear_add_norms cuda_parakeet cuda_canary parakeet_batch; do t $b; done
e() { # split-fp8 model lane batch
  STAPES_CUDA_SPLIT_FP8=$1 $B/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 20 --batch $4 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; b=sys.argv[4]
k="encode_batched" if b!="1" else "encode_device"
print("split_fp8", sys.argv[1], sys.argv[2], sys.argv[3], "batch", b, "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 $4 || tail -3 /tmp/t2/e.err; }
for s in 0 1; do e $s parakeet-tdt-0.6b-v2 q8 1 > /dev/null; e $s canary-1b-flash q8 1 > /dev/null; done
for r in 1 2 3; do for s in 0 1; do e $s parakeet-tdt-0.6b-v2 q8 1; e $s canary-1b-flash q8 1; done; done
echo "elapsed $(el) s"
# where 16 clips' 6 ms go (stop 43's capture ran out of launches in the one-clip warm-up first)
timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  --launch-skip 2500 --launch-count 3000 $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda \
  --lane q8 --audio samples/jfk.wav --iters 1 --batch 16 > /tmp/o/ncu-parakeet-q8-b16.csv 2>/tmp/t2/ncu.err
echo "ncu b16 rc=$? elapsed $(el)"
python3 tools/bench/ncu_kernels.py /tmp/o/ncu-parakeet-q8-b16.csv --marker rel_attn --top 15
STAPES=$B/stapes OUT=/tmp/o/cmp ITERS=10 TOOLS=dist/tools timeout 300 bash tools/bench/gpu_compare.sh > /tmp/o/cmp.txt 2>&1
tail -30 /tmp/o/cmp.txt
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
