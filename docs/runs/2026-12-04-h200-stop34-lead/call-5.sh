#!/usr/bin/env bash
# Stop 34 call 5: v62 = FP8 q8 lane with every producer writing e4m3 where it knows its
# consumer (norms, split-K norms, warpgroup attention, the MLP's fc1 epilogue). Whisper tests on
# real tiny.en and the FP8 tests; the q8 lane (FP8) against STAPES_CUDA_Q8_MIX=f16, alternating;
# then gpu_compare.sh (ours f16/q8 + PyTorch+graph, one lease) for turbo, parakeet, canary.
# Carry dist/v62a dist/au dist/tiny.bin.xz dist/tools dist/run34.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b62
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
date -u
tar -xJf dist/v62a/bins.tar.xz -C $B && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
t() { s=$(date +%s); timeout 240 $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|rel L2|^ok |clean|zeroed|SKIPPED|warpgroup" -A2 /tmp/t2/$1.log | head -40; [ $rc -ne 0 ] && cp /tmp/t2/$1.log $O/; }
for x in fp8 cuda_whisper cuda_batch q8_accuracy q8_mix linear_add attention; do t $x; done
date -u
q() { python3 -c 'import json,sys,re; d=json.load(sys.stdin); r=d["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); c=str(d.get("counters")); f=lambda k: (re.search(k+r": (\d+)", c) or [None,None])[1]; dc=re.search(r"declines: (\{.*\})", c); print("enc_dev", g("encode_device"), "batched", g("encode_batched"), "fp8", f("gemm_q8_fp8"), "q8f16", f("gemm_q8_f16"), "declines", dc[1] if dc else None)'; }
b() { timeout 90 $B/stapes bench --synthetic $1 --device cuda --lane $2 --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
T=whisper-large-v3-turbo
b $T q8 > /dev/null
for r in 1 2; do
  for m in $T parakeet-tdt-0.6b-v2 canary-1b-flash; do
    echo "$m q8-fp8 r$r: $(b $m q8)"
    echo "$m q8-f16copy r$r: $(STAPES_CUDA_Q8_MIX=f16 b $m q8)"
  done
done
date -u
mkdir -p /tmp/gc && STAPES=$B/stapes OUT=/tmp/gc ITERS=10 TOOLS=dist/tools MODELS="whisper-large-v3-turbo whisper-tiny whisper-base parakeet-tdt-0.6b-v2 canary-1b-flash" timeout 330 bash tools/bench/gpu_compare.sh 2>&1 | tail -40
(cd /tmp/gc && tar -cJf $O/gc.tar.xz .)
date -u
