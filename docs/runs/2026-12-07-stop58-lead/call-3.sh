#!/usr/bin/env bash
# Stop 58, call 3: call 2 cut to what ~150 s of device time holds (vN2, dist/c12): the two-warp
# norms' tests (ln_pair, conformer_ops, cuda_parakeet with the form forced) and the 16-clip A/B
# of the norms' warps. Carry dist/c12 dist/tools.
set -uo pipefail
PACK=dist/c12/all.tar.xz V=vN2 source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2
for b in ln_pair conformer_ops; do t $b; done
STAPES_CUDA_LN_WARPS=2 t cuda_parakeet "" -w2
echo "tests done, elapsed $(el) s"
l() { STAPES_CUDA_LN_WARPS=$1 "${@:2}" | sed "s/^/lnw=$1 /"; }
for r in 1 2; do for w in 1 2; do [ $(el) -lt 120 ] && l $w e vN2 $P q8 16; done; done
echo "done, elapsed $(el) s"
