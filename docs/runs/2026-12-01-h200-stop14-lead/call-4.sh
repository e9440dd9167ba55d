#!/usr/bin/env bash
# Stop 14 call 4: GELU in cuBLASLt's epilogue (STAPES_CUDA_GELU_EPILOGUE): tests, then A/B.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
exec > >(tee -a "$L") 2>&1
export STAPES_CACHE=/tmp/scache4 B=/tmp/b4
mkdir -p $B $STAPES_CACHE /tmp/t4 /tmp/m
tar -xJf dist/d4/bins.tar.xz -C $B && tar -xJf dist/d4/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/d4/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
date -u
run1() { local t=$1; local s=$(date +%s); timeout ${TO:-200} "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t4/$t${TAG:-}.log" 2>&1; local rc=$?; echo "=== $t${TAG:-} rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t4/$t${TAG:-}.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t4/$t${TAG:-}.log" | head -4; [ $rc = 0 ] || { grep -A6 "panicked" "/tmp/t4/$t${TAG:-}.log" | head -14; }; return 0; }
export -f run1
run1 linear_add
grep "gelu epilogue" /tmp/t4/linear_add.log | head -30
printf '%s\n' cuda_whisper cuda_batch q8_accuracy f16_activations | STAPES_CUDA_GELU_EPILOGUE=1 TAG=-gelu xargs -P 4 -I{} bash -c 'run1 {}'
date -u
bj() { timeout 90 "$B/stapes" bench --synthetic "$1" --device cuda --lane "$2" --audio samples/jfk.wav --iters 20 --batch 16 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
d={k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v}
print(sys.argv[1], d)' "$3 $1 $2" || echo "$3 $1 $2 FAILED"; }
for m in whisper-large-v3-turbo whisper-tiny whisper-base; do for l in f16 q8; do
  STAPES_CUDA_GELU_EPILOGUE=0 bj $m $l erf-pass
  STAPES_CUDA_GELU_EPILOGUE=1 bj $m $l epilogue
done; done
date -u
for e in 0 1; do for l in f16 q8; do STAPES_CUDA_GELU_EPILOGUE=$e $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav 2>&1 | tail -1 | sed "s/^/gelu-epi=$e $l: /"; done; done
STAPES_CUDA_GELU_EPILOGUE=1 $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane f16 "$STAPES_CACHE/audio/librivox/sense_and_sensibility_01_austen_64kb-0870.wav" 2>&1 | tail -3
date -u
cd /tmp/t4 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
