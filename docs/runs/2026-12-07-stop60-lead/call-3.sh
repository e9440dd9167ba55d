#!/usr/bin/env bash
# Stop 60, call 3: the one-clip regression that call 2's ncu found (vM = 2fabc29 against vG =
# main 383e13f, same H100: glu_dw_act's 32-frame grid at one clip, rel_attn's runtime tail flag).
# vN = vG + rel_attn's tail skip as its own entries + glu_dw_act's frames by shape. Alternating on
# one card, after vN's GPU tests: one parakeet clip, one canary clip, 16 parakeet clips; vN
# also with STAPES_CUDA_REL_TAIL=0 (the plain entries, 2fabc29's code). Cut to fit the ~300 s
# of device time left.
# Carry dist/c20 (pack_bundles.sh c20 vM vGs vN; vGs = vG's stapes alone), dist/tools.
set -uo pipefail
PACK=dist/c20/all.tar.xz V=vN source tools/bench/device_env.sh
cat $B/COMMIT
P=parakeet-tdt-0.6b-v2; Cn=canary-1b-flash
for b in conformer_ops cuda_parakeet parakeet_batch cuda_canary; do t $b; done
echo "tests done, elapsed $(el) s"
tail0() { STAPES_CUDA_REL_TAIL=0 e "$@" | sed 's/^/tail0 /'; }
e vN $P q8; e vM $P q8; tail0 vN $P q8
e vN $Cn q8; e vM $Cn q8
e vN $P q8 16; e vM $P q8 16; tail0 vN $P q8 16
e vN $P q8; e vM $P q8; e vN $P q8 16; tail0 vN $P q8 16; e vGs $P q8 16
echo "done, elapsed $(el) s"
