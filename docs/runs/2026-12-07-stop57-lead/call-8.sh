#!/usr/bin/env bash
# Stop 57, call 8: PACK = dist/c8/all.tar.xz (pack_bundles.sh c8 vW): vW = a7f40da + glu_dw_act
# with blocks of 32 output frames behind STAPES_CUDA_GDW_ROWS=32 (`gdw-rows32-untested.diff.txt`; 16 by
# default). conformer_ops with the switch on, then the A/B alternating. Carry dist/c8 dist/tools.
set -uo pipefail
PACK=dist/c8/all.tar.xz V=vW source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2
STAPES_CUDA_GDW_ROWS=32 t conformer_ops
q() { STAPES_CUDA_GDW_ROWS=$1 "${@:2}" | sed "s/^/rows=$1 /"; }
for r in 1 2 3; do for m in 16 32; do q $m e vW $P q8 16; done; done
for m in 16 32; do q $m e vW $P q8; done
echo "done, elapsed $(el) s"
