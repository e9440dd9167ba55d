#!/usr/bin/env bash
# Stop 45, call 1: stop 44's call-next-not-run.sh as prepared, on bundle v100 = 62dac48 (f8wg on by
# default; stage_device.sh v100 "fp8 cuda_parakeet cuda_canary cuda_gigaam cuda_qwen3a cuda_gemma4a
# parakeet_batch graphs linear_add_norms conformer_ops"). Every family's GPU test, then each q8
# encoder with STAPES_CUDA_F8WG 0 / 1 alternating, then every family beside PyTorch + graph.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
V=${V:?the bundle name, e.g. V=v100}
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/$V.tar.xz -C /tmp/x && cp -r /tmp/x/$V/audio $STAPES_CACHE/
B=/tmp/x/$V
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout 90 $B/$1 --test-threads=1 --nocapture > /tmp/o/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/o/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED" /tmp/o/$1.log | head -8; }
for b in cuda_qwen3a cuda_gigaam cuda_gemma4a fp8 cuda_parakeet cuda_canary parakeet_batch linear_add_norms graphs conformer_ops; do
  t $b; [ $(el) -gt 300 ] && break; done
echo "elapsed $(el) s"
e() { # f8wg model
  STAPES_CUDA_F8WG=$1 $B/stapes bench --synthetic $2 --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_device"
print("f8wg", sys.argv[1], sys.argv[2], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 || tail -3 /tmp/t2/e.err; }
for m in qwen3-asr-0.6b gigaam-v3-ctc parakeet-tdt-0.6b-v2 canary-1b-flash; do
  e 0 $m > /dev/null; for r in 1 2; do e 0 $m; e 1 $m; done; [ $(el) -gt 420 ] && break; done
STAPES=$B/stapes OUT=/tmp/o/cmp ITERS=10 TOOLS=dist/tools timeout 120 bash tools/bench/gpu_compare.sh > /tmp/o/cmp.txt 2>&1
tail -30 /tmp/o/cmp.txt
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
