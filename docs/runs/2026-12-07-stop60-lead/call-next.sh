#!/usr/bin/env bash
# Prepared for the next stop (not run in stop 60: no device time was left). PACK = dist/c21
# (pack_bundles.sh c21 vM vN b8f2d3dd bdb696bc b0ea7c8b bd44646a b88f5787 be024acf): vM =
# 2fabc29 (stop 55's code, one clip 1.418 ms on stop 60's H100), vN = 30890cf (main: the plain
# rel_attn's tail entries, the split-keys form's old kernel, glu_dw_act's frames by shape), and
# the stapes CLI at six commits between them (stop 57's e4m3 hidden on, stop 57's last, stop
# 58's 32-frame glu_dw_act, stop 58's last, stop 59's stem entries, stop 59's defaults). vN's
# tests first, then one parakeet clip on every build alternating (two rounds): the commit where
# one clip jumps ~0.1 ms is the rest of the gap.
# Then vN against vM at one canary clip and 16 clips, with rel_attn's tail both ways.
# Carry dist/c21, dist/tools.
set -uo pipefail
PACK=dist/c21/all.tar.xz V=vN source tools/bench/device_env.sh
cat $B/COMMIT
P=parakeet-tdt-0.6b-v2; Cn=canary-1b-flash
for b in conformer_ops cuda_parakeet parakeet_batch cuda_canary fc_subsample; do t $b; done
echo "tests done, elapsed $(el) s"
tail0() { STAPES_CUDA_REL_TAIL=0 e "$@" | sed 's/^/tail0 /'; }
for r in 1 2; do
  for v in vM b8f2d3dd bdb696bc b0ea7c8b bd44646a b88f5787 be024acf vN; do e $v $P q8; done
  tail0 vN $P q8; STAPES_CUDA_GDW_ROWS=32 e vN $P q8 | sed 's/^/gdw32 /'
done
for v in vM vN; do e $v $Cn q8; done; tail0 vN $Cn q8
for r in 1 2; do for v in vM vN; do e $v $P q8 16; done; tail0 vN $P q8 16; done
echo "done, elapsed $(el) s"
