#!/usr/bin/env bash
# Stop 35 call 4: build v65 = v64 + layer_norm_attention_add (the q|k|v bias added by the attention)
# on the FP8 path. Its CUDA tests, the Whisper ones on
# real tiny.en (q8_0 ggml from `stapes convert`), then a short turbo bench.
# Carry dist/v65.tar.xz dist/tiny.bin.xz dist/au dist/run35.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b64
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
date -u
tar -xJf dist/v65.tar.xz -C $B && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
t() { s=$(date +%s); timeout 240 $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|rel L2|^ok " -A2 /tmp/t2/$1.log | head -30; [ $rc -ne 0 ] && cp /tmp/t2/$1.log $O/; }
for x in fp8 attention graphs q8_mix linear_add cuda_whisper cuda_batch; do t $x; done
cp /tmp/t2/cuda_whisper.log /tmp/t2/fp8.log $O/ 2>/dev/null
date -u
for l in q8 f16; do for i in 1 2; do $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t2/jfk.txt 2>&1; echo "jfk tiny.en $l: $(tail -1 /tmp/t2/jfk.txt)"; done; done
q() { python3 -c 'import json,sys,re; d=json.load(sys.stdin); r=d["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); c=str(d.get("counters")); f=lambda k: (re.search(k+r": (\d+)", c) or [None,None])[1]; print("enc_dev", g("encode_device"), "enc", g("encode"), "fp8", f("gemm_q8_fp8"))'; }
b() { timeout 90 $B/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane $1 --iters 30 --batch 1 --decode-tokens 2 --json 2>/tmp/t2/err.txt | tee $O/turbo-$1-$2.json | q || tail -3 /tmp/t2/err.txt; }
b q8 warm >/dev/null
for r in 1 2 3; do echo "v65 q8 r$r: $(b q8 r$r)"; done
date -u
