#!/usr/bin/env bash
# Stop 35 call 7: build v67 = 708e3b3 + the q|k|v bias left to the attention only where the whole
# warpgroup form runs (tiny/base keep it in the GEMM) and on the f16 lane too. Its CUDA tests
# (FP8, attention, Whisper fixtures, FastConformer chains and models); then, every process tuning
# afresh, alternating v66 (708e3b3) and v67: turbo f16 and q8, tiny and base q8.
# Carry dist/v67.tar.xz dist/v66.tar.xz dist/au dist/run35.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b67 A=/tmp/b66
mkdir -p $B $A $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v67.tar.xz -C $B && tar -xJf dist/v66.tar.xz -C $A ./stapes && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
t() { s=$(date +%s); timeout 200 $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|fused vs|warpgroup" -A2 /tmp/t2/$1.log | head -20; [ $rc -ne 0 ] && cp /tmp/t2/$1.log $O/; }
for x in fp8 attention graphs linear_add_norms ln_pair conformer_ops cuda_whisper cuda_batch cuda_parakeet cuda_canary parakeet_batch; do t $x; done
date -u
q() { python3 -c 'import json,sys; d=json.load(sys.stdin); r=d["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print("enc_dev", g("encode_device"), "enc", g("encode"))'; }
b() { timeout 90 $1 bench --synthetic $2 --device cuda --lane $3 --iters 30 --batch 1 --decode-tokens 2 --json 2>/tmp/t2/err.txt | tee $O/$4.json | q || tail -3 /tmp/t2/err.txt; }
T=whisper-large-v3-turbo
for r in 1 2 3; do
  echo "turbo f16 v66 r$r: $(STAPES_CUDA_LT_CACHE=0 b $A/stapes $T f16 f16-v66-r$r)"
  echo "turbo f16 v67 r$r: $(STAPES_CUDA_LT_CACHE=0 b $B/stapes $T f16 f16-v67-r$r)"
done
for r in 1 2; do
  echo "turbo q8 v66 r$r: $(STAPES_CUDA_LT_CACHE=0 b $A/stapes $T q8 q8-v66-r$r)"
  echo "turbo q8 v67 r$r: $(STAPES_CUDA_LT_CACHE=0 b $B/stapes $T q8 q8-v67-r$r)"
  for m in whisper-tiny whisper-base; do
    echo "$m q8 v66 r$r: $(STAPES_CUDA_LT_CACHE=0 b $A/stapes $m q8 $m-v66-r$r)"
    echo "$m q8 v67 r$r: $(STAPES_CUDA_LT_CACHE=0 b $B/stapes $m q8 $m-v67-r$r)"
  done
done
date -u
