#!/usr/bin/env bash
# Stop 13 call 1: every CUDA test (mix rule default), then A/B benches of the switches.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
exec > >(tee -a "$L") 2>&1
export STAPES_CACHE=/tmp/scache B=/tmp/b
mkdir -p /tmp/b /tmp/scache /tmp/m
tar -xJf dist/c1/bins.tar.xz -C /tmp/b && tar -xJf dist/c1/cache.tar.xz -C /tmp/scache
xz -dc dist/c1/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader; date -u
run1() { local t=$1; local s=$(date +%s); timeout 200 "$B/$t" --test-threads=1 > "$O/t-$t.log" 2>&1; local rc=$?; echo "=== $t${PDLTAG:-} rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "$O/t-$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "$O/t-$t.log" | head -6; }
export -f run1; export O
printf '%s\n' cuda_label_loop cuda_parakeet cuda_fc_shapes cuda_canary cuda_whisper cuda_batch attention cuda_fc_kernels ops graphs select transducer_ops conformer_ops step_fused f16_activations linear_add q8_accuracy q8_mix open ln_pair fc_subsample cross_f16 pdl i8gemm \
  | xargs -P 4 -I{} bash -c 'run1 {}'
date -u
bj() { "$B/stapes" bench --synthetic "$1" --device cuda --lane "$2" --audio samples/jfk.wav --iters 20 --batch 16 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
d={k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v}
d.update({k:round(v,3) for k,v in r.get("extra",{}).items()})
print(sys.argv[1], d)' "$3 $1 $2" || echo "$3 $1 $2 FAILED"; }
for m in whisper-large-v3-turbo whisper-tiny whisper-base parakeet-tdt-0.6b-v2 canary-1b-flash; do
  bj $m f16 base
  bj $m q8 mix
  STAPES_CUDA_Q8_MIX=0 bj $m q8 int8
  STAPES_CUDA_Q8_MIX=f16 bj $m q8 allf16
  STAPES_CUDA_PDL=1 bj $m f16 pdl
done
date -u
for m in whisper-large-v3-turbo whisper-tiny; do
  STAPES_CUDA_CROSS_F16=1 bj $m f16 crossf16
  STAPES_CUDA_SELECT_SPLIT=1 bj $m f16 selsplit
  STAPES_CUDA_PDL=1 STAPES_CUDA_CROSS_F16=1 STAPES_CUDA_SELECT_SPLIT=1 bj $m f16 all3
done
date -u
COLS="8 16 32 64" STAPES=$B/stapes TRANSDUCER_OPS=$B/transducer_ops bash tools/bench/parakeet_gemv_cols.sh
date -u
export PDLTAG=-pdl STAPES_CUDA_PDL=1
printf '%s\n' cuda_whisper cuda_parakeet cuda_canary graphs ops step_fused attention conformer_ops | xargs -P 4 -I{} bash -c 'run1 {}'
date -u
