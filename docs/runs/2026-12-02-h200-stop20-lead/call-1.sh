#!/usr/bin/env bash
# Stop 20 call 1: the int8 TMA GEMM with pipelined consumers (i8gemm_tma_p*): its bitwise tests
# against the library path (every variant, f32 and f16 chain + replay), the micro-benchmark of
# the TMA forms at the encoder shapes, then whole encoders with every q8 GEMM on it.
# Stage: dist/stage2.sh v1 "i8gemm"; carry dist/v1.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c1 B=/tmp/b1
mkdir -p $B $STAPES_CACHE /tmp/t1
tar -xJf dist/v1/bins.tar.xz -C $B && tar -xJf dist/v1/cache.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
s=$(date +%s); timeout 240 $B/i8gemm --test-threads=1 > /tmp/t1/i8gemm.log 2>&1; echo "=== i8gemm rc=$? $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t1/i8gemm.log | tail -1)"; grep -E "panicked|SKIPPED" -A4 /tmp/t1/i8gemm.log | head -10
STAPES_I8_BENCH_TILES=tma_n128s6,tma_n256s4,tma_p128s3x2,tma_p128s6,tma_p256s4 timeout 200 $B/i8gemm --ignored i8gemm_bench --nocapture --test-threads=1 2>&1 | grep -E "^\||device"
for m in whisper-large-v3-turbo parakeet-tdt-0.6b-v2; do
  for l in f16 q8; do echo "--- $m $l default"; $B/stapes bench --synthetic $m --device cuda --lane $l --audio samples/jfk.wav --iters 20 --json 2>/dev/null | python3 -c "import json,sys;r=json.load(sys.stdin)['report'];print({k:round(v['median_ms'],3) for k,v in r.items() if isinstance(v,dict)})"; done
  for t in tma_n128s6 tma_p128s3x2 tma_p128s6 tma_p256s4; do echo "--- $m q8 int8 $t"; STAPES_CUDA_Q8_MIX=0 STAPES_CUDA_I8GEMM=1 STAPES_CUDA_I8GEMM_TILE=$t $B/stapes bench --synthetic $m --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --json 2>/dev/null | python3 -c "import json,sys;r=json.load(sys.stdin)['report'];print({k:round(v['median_ms'],3) for k,v in r.items() if isinstance(v,dict)})"; done
done
cd /tmp/t1 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
