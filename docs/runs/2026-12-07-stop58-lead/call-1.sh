#!/usr/bin/env bash
# Stop 58, call 1: PACK = dist/c10/all.tar.xz (pack_bundles.sh c10 vY): vY = main 892a7b4 +
# stop 57's `gdw-rows32-untested.diff.txt` (glu_dw_act with blocks of 32 output frames behind
# STAPES_CUDA_GDW_ROWS=32; 16 by default, main's code). Two questions, both as A/B in one call:
# (1) blocks of 32 frames for glu_dw_act (stop 57's call-8.sh); (2) our f8wg past 512 rows
# (stop 57's call-9-not-run.sh): STAPES_CUDA_F8WG_MAX_M=4096 with a forced form puts 16 clips'
# plain GEMMs (q|k|v, pw1) and fc1 (SiLU in the epilogue, no act8 pass) on it. On an H200 the
# comparison beside PyTorch + graph and whisper.cpp (stop 54's call-cmp.sh) runs instead of
# ncu. Carry dist/c10 dist/tools dist/wcpp.tar.xz.
set -uo pipefail
PACK=dist/c10/all.tar.xz V=vY source tools/bench/device_env.sh
wcpp_bg
P=parakeet-tdt-0.6b-v2
STAPES_CUDA_GDW_ROWS=32 t conformer_ops "" -rows32
export STAPES_CUDA_F8WG_MAX_M=4096
for f in n144s6 n72s8; do
  for b in cuda_parakeet parakeet_batch cuda_canary; do STAPES_CUDA_F8WG=$f t $b "" -$f; done
done
unset STAPES_CUDA_F8WG_MAX_M
echo "tests done, elapsed $(el) s"
q() { local f=$1; shift
  if [ "$f" = 1 ]; then "$@" | sed "s/^/f8wg=default /"
  else STAPES_CUDA_F8WG_MAX_M=4096 STAPES_CUDA_F8WG=$f "$@" | sed "s/^/f8wg=$f /"; fi; }
g() { STAPES_CUDA_GDW_ROWS=$1 "${@:2}" | sed "s/^/rows=$1 /"; }
for r in 1 2 3; do
  for f in 1 n144s6 n72s8; do q $f e vY $P q8 16; done
  for m in 16 32; do g $m e vY $P q8 16; done
done
for m in 16 32; do g $m e vY $P q8; done
for f in 1 n144s6; do q $f e vY canary-1b-flash q8; done
echo "bench done, elapsed $(el) s"
if [ $H200 = 0 ]; then
  for f in 1 n144s6 n72s8; do
    if [ $f = 1 ]; then ev=""; else ev="STAPES_CUDA_F8WG_MAX_M=4096 STAPES_CUDA_F8WG=$f"; fi
    timeout 100 env $ev ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      $B/stapes bench --synthetic $P --device cuda --lane q8 --batch 16 --iters 1 > /tmp/o/ncu-f8wg-$f.csv 2>/dev/null
    echo "=== ncu f8wg=$f rc=$? elapsed $(el)"; xz -c /tmp/o/ncu-f8wg-$f.csv > $O/ncu-f8wg-$f.csv.xz
    python3 tools/bench/ncu_kernels.py /tmp/o/ncu-f8wg-$f.csv --marker rel_attn_d128 --top 12 | head -24
  done
fi
if [ -n "$WB" ]; then wait $WB; tail -3 /tmp/wcmake.log; fi
[ $H200 = 1 ] && CMP_LIMIT=$(( 585 - $(el) )) V=vY bash docs/runs/2026-12-06-stop54-lead/call-cmp.sh > /dev/null
[ $H200 = 1 ] && tail -42 $O/cmp.txt
echo "done, elapsed $(el) s"
