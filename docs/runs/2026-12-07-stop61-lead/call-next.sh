#!/usr/bin/env bash
# Prepared for the next stop (not run). PACK = dist/c24 (pack_bundles.sh c24 w1 vP vM): w1 = main
# with glu_dw_act's frame counts as entries of their own (f064edd), vP = 60888e0 (the one entry
# switching at run time), vM = 2fabc29 (stop 55's code, one clip 1.41 ms on stop 61's H100).
# Carry dist/c24, dist/tools, dist/wcpp.tar.xz. ~450 s on an H200, ~250 s elsewhere.
# 1. On an H200, whisper.cpp builds in the background.
# 2. w1's tests of the changed kernel and the families over it.
# 3. One parakeet clip, vM / vP / w1 alternating (two rounds), canary, 16 clips: whether f064edd
#    brings one clip back to vM's 1.41 and what its own 32-frame entry does at 16 clips.
# 4. On an H200: ours and PyTorch + graph (gpu_compare.sh) and whisper-bench, one table. Then,
#    on the same warm machine, `V=w1 bash tools/bench/rw_call.sh` four times (one dist/rwN each,
#    crates/*/tests/fixtures moved aside) and `V=w1 bash tools/bench/ncu_call.sh`.
set -uo pipefail
PACK=dist/c24/all.tar.xz V=w1 source tools/bench/device_env.sh
cat $B/COMMIT
wcpp_bg
P=parakeet-tdt-0.6b-v2; Cn=canary-1b-flash
for b in conformer_ops cuda_parakeet parakeet_batch cuda_canary cuda_gigaam fc_subsample pdl; do t $b; done
echo "tests done, elapsed $(el) s"
for r in 1 2; do for v in vM vP w1; do e $v $P q8; done; done
for v in vM vP w1; do e $v $Cn q8; done
for r in 1 2; do for v in vP w1; do e $v $P q8 16; done; done
STAPES_CUDA_GDW_ROWS=16 e w1 $P q8 16 | sed 's/^/gdw16 /'
echo "A/B done, elapsed $(el) s"
[ "$H200" = 1 ] && peers 540
echo "done, elapsed $(el) s"
