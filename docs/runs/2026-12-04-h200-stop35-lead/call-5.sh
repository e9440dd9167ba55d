#!/usr/bin/env bash
# Stop 35 call 5: build v66 = v65 (layer_norm_attention_add: the attention adds the q|k|v bias)
# + the tuner's 3 rounds (STAPES_CUDA_LT_ROUNDS) + the fixed test. fp8 tests; then turbo q8 one
# window, every process tuning afresh (STAPES_CUDA_LT_CACHE=0), alternating: v64 (f4b8b87),
# v66 with 1 round (v65's tuner), v66 default; then gpu_compare.sh on v66 beside PyTorch+graph.
# Carry dist/v66.tar.xz dist/v64s.tar.xz dist/au dist/tools dist/run35.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b66 A=/tmp/b64
mkdir -p $B $A $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v66.tar.xz -C $B && tar -xJf dist/v64s.tar.xz -C $A && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
t() { s=$(date +%s); timeout 240 $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|fused vs|warpgroup" -A2 /tmp/t2/$1.log | head -30; [ $rc -ne 0 ] && cp /tmp/t2/$1.log $O/; }
t fp8
date -u
q() { python3 -c 'import json,sys,re; d=json.load(sys.stdin); r=d["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); c=str(d.get("counters")); f=lambda k: (re.search(k+r": (\d+)", c) or [None,None])[1]; print("enc_dev", g("encode_device"), "enc", g("encode"), "fp8", f("gemm_q8_fp8"))'; }
b() { timeout 90 $1 bench --synthetic whisper-large-v3-turbo --device cuda --lane q8 --iters 30 --batch 1 --decode-tokens 2 --json 2>/tmp/t2/err.txt | tee $O/turbo-$2.json | q || tail -3 /tmp/t2/err.txt; }
b $B/stapes warm >/dev/null
for r in 1 2 3 4; do
  echo "v64 fresh r$r: $(STAPES_CUDA_LT_CACHE=0 b $A/stapes v64-r$r)"
  echo "v66 1-round fresh r$r: $(STAPES_CUDA_LT_CACHE=0 STAPES_CUDA_LT_ROUNDS=1 b $B/stapes v66r1-r$r)"
  echo "v66 fresh r$r: $(STAPES_CUDA_LT_CACHE=0 b $B/stapes v66-r$r)"
done
date -u
mkdir -p /tmp/gc && STAPES=$B/stapes OUT=/tmp/gc ITERS=10 TOOLS=dist/tools timeout 300 bash tools/bench/gpu_compare.sh 2>&1 | tail -30
(cd /tmp/gc && tar -cJf $O/gc.tar.xz .)
date -u
