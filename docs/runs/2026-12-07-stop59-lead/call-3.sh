#!/usr/bin/env bash
# Stop 59, call 3: call 2 cut to ~200 s for a session with little device time left (vD, dist/c16):
# the new forms' tests (ln_pair, conformer_ops, fc_subsample; the family tests with each forced)
# and the 16-clip A/B of the norms' warps, the stem's frames a block and rel_attn's tail skip;
# no comparison with the peers. Carry dist/c16 dist/tools.
set -uo pipefail
PACK=dist/c16/all.tar.xz V=vD source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2
for b in ln_pair conformer_ops fc_subsample cuda_parakeet parakeet_batch; do t $b; done
STAPES_CUDA_LN_WARPS=2 STAPES_CUDA_STEM_FRAMES=2 STAPES_CUDA_REL_TAIL=1 t cuda_parakeet "" -new
STAPES_CUDA_LN_WARPS=2 STAPES_CUDA_STEM_FRAMES=4 STAPES_CUDA_REL_TAIL=1 t parakeet_batch "" -new
echo "tests done, elapsed $(el) s"
for r in 1 2; do
  for w in 1 2; do [ $(el) -lt 170 ] && STAPES_CUDA_LN_WARPS=$w e vD $P q8 16 | sed "s/^/lnw=$w /"; done
  for f in 2 4; do [ $(el) -lt 170 ] && STAPES_CUDA_STEM_FRAMES=$f e vD $P q8 16 | sed "s/^/stemf=$f /"; done
  [ $(el) -lt 170 ] && STAPES_CUDA_REL_TAIL=1 e vD $P q8 16 | sed "s/^/tail=1 /"
done
echo "done, elapsed $(el) s"
