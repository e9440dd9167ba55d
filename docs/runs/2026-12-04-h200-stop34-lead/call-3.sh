#!/usr/bin/env bash
# Stop 34 call 3: v61 = FP8 q8 lane + the MLP's hidden in e4m3 (mlp_add) + norms writing the
# FP8 GEMM's input (layer_norm_feeding). Whisper tests on real tiny.en, the FP8 tests, then the
# q8 lane (FP8) against STAPES_CUDA_Q8_MIX=f16 and the f16 lane, one tuning cache, alternating.
# Carry dist/v61a dist/au dist/tiny.bin.xz dist/run34.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b61
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
date -u
tar -xJf dist/v61a/bins.tar.xz -C $B && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
t() { s=$(date +%s); timeout 240 $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1${2:-}.log 2>&1; rc=$?
  echo "=== $1 ${2:-} rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1${2:-}.log | tail -1)"
  grep -E "panicked|rel L2|^ok |clean|zeroed|SKIPPED" -A2 /tmp/t2/$1${2:-}.log | head -40; [ $rc -ne 0 ] && cp /tmp/t2/$1${2:-}.log $O/; }
for x in fp8 cuda_whisper cuda_batch q8_accuracy q8_mix linear_add; do t $x; done
date -u
q() { python3 -c 'import json,sys,re; d=json.load(sys.stdin); r=d["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); x=r.get("extra") or {}; c=str(d.get("counters")); f=lambda k: (re.search(k+r": (\d+)", c) or [None,None])[1]; print("enc_dev", g("encode_device"), "batched", g("encode_batched"), "dec/tok", g("decode_token"), "e2e", x.get("end_to_end_29_tokens_ms"), "fp8", f("gemm_q8_fp8"), "q8f16", f("gemm_q8_f16"))'; }
b() { timeout 90 $B/stapes bench --synthetic $1 --device cuda --lane $2 --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | tee $O/$1-$2-$3.json | q || tail -3 /tmp/t2/err.txt; }
e() { timeout 90 $B/stapes bench --synthetic $1 --device cuda --lane $2 --audio samples/jfk.wav --iters 10 --batch 1 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
T=whisper-large-v3-turbo
b $T q8 warm > /dev/null; STAPES_CUDA_Q8_MIX=f16 b $T q8 warm >/dev/null
for r in 1 2 3; do
  echo "$T q8-fp8 r$r: $(b $T q8 fp8$r)"
  echo "$T q8-f16copy r$r: $(STAPES_CUDA_Q8_MIX=f16 b $T q8 copy$r)"
  echo "$T f16 r$r: $(b $T f16 f16$r)"
done
for r in 1 2; do
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash whisper-tiny whisper-base; do
    echo "$m q8-fp8 r$r: $(b $m q8 fp8$r)"
    echo "$m q8-f16copy r$r: $(STAPES_CUDA_Q8_MIX=f16 b $m q8 copy$r)"
  done
done
for r in 1 2; do echo "$T e2e q8 r$r: $(e $T q8)"; echo "$T e2e f16 r$r: $(e $T f16)"; done
date -u
for l in q8 f16; do for i in 1 2; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t2/jfk.txt 2>&1; e2=$(date +%s%N); echo "jfk tiny.en $l beam5 whole process $(( (e2-s)/1000000 )) ms: $(tail -1 /tmp/t2/jfk.txt)"; done; done
date -u
