#!/usr/bin/env bash
# Stop 57, prepared for the next stop (not run: no device time was left). Whether our own FP8
# GEMM (`f8wg`, one warpgroup, TMA ring) beats cuBLASLt on 16 clips' GEMMs without a residual
# (q|k|v 2240 × 3072 × 1024 at ~770 TFLOP/s, pw1 2240 × 2048 × 1024 at ~680 under ncu) and on fc1
# with its SiLU in the epilogue, past the 512 rows it is limited to: STAPES_CUDA_F8WG_MAX_M
# lifts the bound, STAPES_CUDA_F8WG=n144s6 / n72s8 forces a form (by shape it keeps grids of one
# wave). The residual GEMMs (out, pw2 at ~420 TFLOP/s) would need a residual in f8wg's epilogue
# first. PACK = dist/c9/all.tar.xz (pack_bundles.sh c9 vX; vX = stage_device.sh of main's head
# with "fp8 cuda_parakeet parakeet_batch cuda_canary"). Carry dist/c9 dist/tools.
set -uo pipefail
PACK=dist/c9/all.tar.xz V=vX source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2
export STAPES_CUDA_F8WG_MAX_M=4096
for f in n144s6 n72s8; do
  for b in cuda_parakeet parakeet_batch cuda_canary; do STAPES_CUDA_F8WG=$f t $b "" -$f; done
done
unset STAPES_CUDA_F8WG_MAX_M
q() { local m=$1 f=$2; shift 2
  if [ "$f" = 1 ]; then "$@" | sed "s/^/f8wg=default /"
  else STAPES_CUDA_F8WG_MAX_M=4096 STAPES_CUDA_F8WG=$f "$@" | sed "s/^/f8wg=$f /"; fi; }
for r in 1 2 3; do for f in 1 n144s6 n72s8; do q 0 $f e vX $P q8 16; done; done
for f in 1 n144s6; do q 0 $f e vX canary-1b-flash q8; done
for f in 1 n144s6; do
  timeout 120 env STAPES_CUDA_F8WG_MAX_M=4096 STAPES_CUDA_F8WG=$f ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    $B/stapes bench --synthetic $P --device cuda --lane q8 --batch 16 --iters 1 > /tmp/o/ncu-f8wg-$f.csv 2>/dev/null
  python3 tools/bench/ncu_kernels.py /tmp/o/ncu-f8wg-$f.csv --marker rel_attn_d128 --top 12 | tail -30
done
echo "done, elapsed $(el) s"
