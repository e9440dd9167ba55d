#!/usr/bin/env bash
# Stop 34 call 2: v60 = main + the q8 lane on FP8 (e4m3 copies of q8 weights, activations
# converted by a pass, cuBLASLt FP8 with fast accumulation). Tests on real tiny.en, then the
# q8 lane as FP8 (default) against STAPES_CUDA_Q8_MIX=f16 (the f16 copy) and f16, one tuning
# cache, alternating. Carry dist/v60 dist/au dist/tiny.bin.xz dist/run34.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b60
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
date -u
tar -xJf dist/v60/bins.tar.xz -C $B && tar -xJf dist/v60/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
ls $B
t() { s=$(date +%s); timeout 240 $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1${2:-}.log 2>&1; rc=$?
  echo "=== $1 ${2:-} rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1${2:-}.log | tail -1)"
  grep -E "panicked|rel L2|q8 Fp8|q8 F16|clean|zeroed" -A2 /tmp/t2/$1${2:-}.log | head -30; [ $rc -ne 0 ] && cp /tmp/t2/$1${2:-}.log $O/; }
t cuda_whisper
STAPES_CUDA_Q8_MIX=f16 t cuda_whisper _f16copy
for x in q8_accuracy q8_mix linear_add; do t $x; done
date -u
q() { python3 -c 'import json,sys,re; d=json.load(sys.stdin); r=d["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); c=str(d.get("counters")); f=lambda k: (re.search(k+r": (\d+)", c) or [None,None])[1]; print("enc_dev", g("encode_device"), "batched", g("encode_batched"), "fp8", f("gemm_q8_fp8"), "q8f16", f("gemm_q8_f16"))'; }
b() { timeout 90 $B/stapes bench --synthetic $1 --device cuda --lane $2 --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | tee $O/$1-$2-$3.json | q || tail -3 /tmp/t2/err.txt; }
T=whisper-large-v3-turbo
b $T q8 warm > /dev/null; STAPES_CUDA_Q8_MIX=f16 b $T q8 warm >/dev/null
for r in 1 2; do
  for m in $T parakeet-tdt-0.6b-v2 canary-1b-flash whisper-tiny; do
    echo "$m q8-fp8 r$r: $(b $m q8 fp8$r)"
    echo "$m q8-f16copy r$r: $(STAPES_CUDA_Q8_MIX=f16 b $m q8 copy$r)"
    echo "$m f16 r$r: $(b $m f16 f16$r)"
  done
done
date -u
