#!/usr/bin/env bash
# Stop 58, call 2: PACK = dist/c11/all.tar.xz (pack_bundles.sh c11 vZ): vZ = main + glu_dw_act's
# block rows as a backend setting (16, 32 or 64 frames, STAPES_CUDA_GDW_ROWS; 32 by default) and
# conformer_ops' new bit-identity test across them. Then: the A/B of 16 / 32 / 64 frames; cuBLASLt
# tuning over 64 heuristic picks against 8 (STAPES_CUDA_LT_CANDIDATES, no saved choices); and
# nsys's trace of a 16-clip encode's graph nodes (real clocks, warm caches, PDL overlap), one
# conformer block printed by tools/bench/nsys_block.py. On an H200, the comparison beside
# PyTorch + graph and whisper.cpp (stop 54's call-cmp.sh) at the end.
# Carry dist/c11 dist/tools dist/wcpp.tar.xz.
set -uo pipefail
PACK=dist/c11/all.tar.xz V=vZ source tools/bench/device_env.sh
wcpp_bg
P=parakeet-tdt-0.6b-v2
for b in conformer_ops cuda_parakeet parakeet_batch cuda_canary cuda_gigaam; do t $b; done
echo "tests done, elapsed $(el) s"
g() { STAPES_CUDA_GDW_ROWS=$1 "${@:2}" | sed "s/^/rows=$1 /"; }
for r in 1 2 3; do for m in 16 32 64; do g $m e vZ $P q8 16; done; done
for m in 16 32 64; do g $m e vZ $P q8; done
for m in 16 32; do g $m e vZ gigaam-v3-ctc q8; g $m e vZ canary-1b-flash q8; done
c() { STAPES_CUDA_LT_CACHE=0 STAPES_CUDA_LT_CANDIDATES=$1 "${@:2}" | sed "s/^/candidates=$1 /"; }
for r in 1 2; do for n in 8 64; do c $n e vZ $P q8 16; done; done
echo "bench done, elapsed $(el) s"
if command -v nsys > /dev/null; then
  timeout 150 nsys profile --cuda-graph-trace=node -o /tmp/o/p16 --force-overwrite true \
    $B/stapes bench --synthetic $P --device cuda --lane q8 --batch 16 --iters 3 > /tmp/o/nsys.log 2>&1
  echo "=== nsys rc=$? elapsed $(el)"; tail -3 /tmp/o/nsys.log
  nsys stats --report cuda_gpu_trace --format csv -o /tmp/o/t16 /tmp/o/p16.nsys-rep > /dev/null 2>&1
  f=$(ls /tmp/o/t16*.csv | head -1); xz -c "$f" > $O/nsys-16-trace.csv.xz
  python3 tools/bench/nsys_block.py "$f" --marker rel_attn_d128
  python3 tools/bench/nsys_block.py "$f" --marker rel_attn_d128 --back 30 | tail -1
else
  echo "no nsys"; ls /usr/local/cuda*/bin | head -40
fi
if [ -n "$WB" ]; then wait $WB; tail -3 /tmp/wcmake.log; fi
[ $H200 = 1 ] && CMP_LIMIT=$(( 585 - $(el) )) V=vZ bash docs/runs/2026-12-06-stop54-lead/call-cmp.sh > /dev/null
[ $H200 = 1 ] && tail -42 $O/cmp.txt
echo "done, elapsed $(el) s"
