#!/usr/bin/env bash
# Stop 58, call 2: PACK = dist/c12/all.tar.xz (pack_bundles.sh c12 vN2): vN2 = ec04c86's code
# (glu_dw_act's block rows 16 / 32 / 64 as a backend setting, 32 by default; the f16 layer norms'
# two-warps-a-row forms, `layer_norm_rows16_w2` and `ln_pair_rows16_w2`) with the norms' form
# picked by shape when STAPES_CUDA_LN_WARPS is unset (ec04c86 keeps one warp then; 1 and 2
# force either in both). Tests (the new conformer_ops and ln_pair ones among them), the A/B of glu_dw_act's
# rows and of the norms' warps, and nsys's trace of a 16-clip encode's graph nodes (real
# clocks, warm caches, PDL overlap) in both norm forms, one conformer block each printed by
# tools/bench/nsys_block.py while time allows. Cut to ~200 s after five starts found no machine (no comparison
# with the peers on an H200: the device time left would not hold it). Carry dist/c12 dist/tools.
set -uo pipefail
PACK=dist/c12/all.tar.xz V=vN2 source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2
for b in ln_pair conformer_ops cuda_parakeet parakeet_batch cuda_canary; do t $b; done
STAPES_CUDA_LN_WARPS=2 t cuda_parakeet "" -w2
TEST_LIMIT=60 t pdl
echo "tests done, elapsed $(el) s"
g() { STAPES_CUDA_GDW_ROWS=$1 "${@:2}" | sed "s/^/rows=$1 /"; }
l() { STAPES_CUDA_LN_WARPS=$1 "${@:2}" | sed "s/^/lnw=$1 /"; }
for r in 1 2; do
  for w in 1 2; do l $w e vN2 $P q8 16; done
  for m in 32 64; do g $m l 1 e vN2 $P q8 16; done
done
for w in 1 2; do l $w e vN2 $P q8; done
echo "bench done, elapsed $(el) s"
if command -v nsys > /dev/null; then
  for w in 2 1; do
    [ $(el) -lt 170 ] || break
    STAPES_CUDA_LN_WARPS=$w timeout 100 nsys profile --cuda-graph-trace=node -o /tmp/o/p16-$w --force-overwrite true \
      $B/stapes bench --synthetic $P --device cuda --lane q8 --batch 16 --iters 3 > /tmp/o/nsys.log 2>&1
    echo "=== nsys lnw=$w rc=$? elapsed $(el)"
    nsys stats --report cuda_gpu_trace --format csv -o /tmp/o/t16-$w /tmp/o/p16-$w.nsys-rep > /dev/null 2>&1
    f=$(ls /tmp/o/t16-$w*.csv | head -1); xz -c "$f" > $O/nsys-16-lnw$w-trace.csv.xz
    python3 tools/bench/nsys_block.py "$f" --marker rel_attn_d128
  done
else echo "no nsys"; ls /usr/local/cuda*/bin | tr '\n' ' '; fi
echo "done, elapsed $(el) s"
