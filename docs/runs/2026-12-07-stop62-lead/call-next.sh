#!/usr/bin/env bash
# Prepared for the next stop: the call README.md describes (tried seventeen times, it never ran),
# on main's final code. Bundles (dist/ does not survive a session; each `stage_device.sh` ~5 min
# here, `pack_bundles.sh c26 vN vW vM vL` ~3):
#   vN = main (the staged rel-attention off by default, act8_e4m3 in one wave):
#        tools/bench/stage_device.sh vN "conformer_ops fp8 pdl cuda_parakeet parakeet_batch
#        cuda_canary cuda_gigaam cuda_whisper cuda_batch"
#   vW = 0fffe9c (stop 61's main, act8_e4m3's old grid), the CLI alone, in a worktree;
#   vM = 2fabc29 (stop 55's code), the CLI alone, in a worktree;
#   vL = main + this folder's lt-search-graph-untested.diff.txt, the CLI alone, in a worktree.
# Worktrees that share target/ through a symlink: `find crates -type f -exec touch {} +` before
# each build, or cargo takes another tree's outputs as fresh (README).
# Carry dist/c26, dist/tools, dist/wcpp.tar.xz. ~300 s on an H100; on an H200 the comparison with
# the peers follows (~450 s in all), then `V=vN bash tools/bench/rw_call.sh` ×4 and
# `V=vN bash tools/bench/ncu_call.sh` on the same warm machine.
set -uo pipefail
PACK=dist/c26/all.tar.xz V=vN source tools/bench/device_env.sh
for v in vN vW vM vL; do echo "$v $(cat /tmp/x/$v/COMMIT | tr '\n' ' ')"; done
wcpp_bg
P=parakeet-tdt-0.6b-v2; Cn=canary-1b-flash
for b in conformer_ops fp8 cuda_parakeet parakeet_batch cuda_canary cuda_gigaam pdl; do t $b; done
echo "tests done, elapsed $(el) s"
# f064edd (glu_dw_act's entries) at one clip against stop 55's code
for v in vM vN vN vM; do e $v $P q8; done
for v in vM vN; do e $v $Cn q8; done
# act8_e4m3 in one wave (vW: its old grid) and the staged rel-attention, at 16 clips
for r in 1 2; do
  e vW $P q8 16
  e vN $P q8 16
  STAPES_CUDA_REL_STAGED=1 e vN $P q8 16 | sed 's/^/staged /'
done
echo "A/B done, elapsed $(el) s"
export STAPES_CUDA_LT_CACHE=0
e vN $P q8 16 | sed 's/^/fresh /'
STAPES_CUDA_LT_SEARCH=1 STAPES_CUDA_LT_GRAPH_BELOW=20000000000 e vL $P q8 16 | sed 's/^/search+graph /'
STAPES_CUDA_LT_GRAPH_BELOW=20000000000 e vL $P q8 16 | sed 's/^/graph /'
STAPES_CUDA_LT_SEARCH=1 STAPES_CUDA_LT_GRAPH_BELOW=20000000000 timeout 40 /tmp/x/vL/stapes --verbose bench \
  --synthetic $P --device cuda --lane q8 --iters 5 --batch 16 > /tmp/t2/vl.txt 2> /tmp/t2/vl.err
grep -E "algorithm chosen" /tmp/t2/vl.err > $O/vl-picks.txt; grep -E "2240" $O/vl-picks.txt | head -12
unset STAPES_CUDA_LT_CACHE
echo "search done, elapsed $(el) s"
[ "$H200" = 1 ] && peers 580
echo "done, elapsed $(el) s"
