#!/usr/bin/env bash
# Stop 62, call 1 (carry dist/c25, dist/tools, dist/wcpp.tar.xz). PACK c25 (pack_bundles.sh c25
# w1 vP vM vL vS):
# - w1 = main 0fffe9c: glu_dw_act's frame counts as entries of their own (f064edd), not yet run
#   on a GPU;
# - vP = 60888e0 (one glu_dw_act entry switching at run time), vM = 2fabc29 (stop 55's code);
# - vL = main + stop 56's cuBLASLt search (STAPES_CUDA_LT_SEARCH=1) + stop 50's
#   STAPES_CUDA_LT_GRAPH_BELOW: out and pw2 at 16 clips (2240 × 1024 × 1024 = 2.35 G
#   multiply-adds) are timed eagerly, host-bound at ~9.6 µs a call, so stop 56's search could
#   not rank their candidates; here every shape is timed in a graph;
# - vS = 863fcb7: the staged rel-attention (rel_attn_s_d128; STAPES_CUDA_REL_STAGED=0 off) and
#   act8_e4m3 in one resident wave.
# The tests, the A/B and the cuBLASLt question (~300 s), then on an H200 the comparison with
# PyTorch + graph and whisper.cpp (whisper.cpp built in the background from the start).
set -uo pipefail
PACK=dist/c25/all.tar.xz V=w1 source tools/bench/device_env.sh
for v in w1 vP vM vL vS; do echo "$v $(cat /tmp/x/$v/COMMIT | tr '\n' ' ')"; done
wcpp_bg
P=parakeet-tdt-0.6b-v2; Cn=canary-1b-flash
for b in conformer_ops cuda_parakeet parakeet_batch cuda_canary cuda_gigaam; do t $b; done
B=/tmp/x/vS
for b in conformer_ops fp8 cuda_parakeet parakeet_batch cuda_canary pdl; do t $b "" -vS; done
B=/tmp/x/w1
echo "tests done, elapsed $(el) s"
for v in vM w1 w1 vM; do e $v $P q8; done
for v in vM w1; do e $v $Cn q8; done
for r in 1 2; do
  e w1 $P q8 16
  e vS $P q8 16
  STAPES_CUDA_REL_STAGED=0 e vS $P q8 16 | sed 's/^/act8-only /'
done
e vP $P q8 16
echo "A/B done, elapsed $(el) s"
export STAPES_CUDA_LT_CACHE=0
e w1 $P q8 16 | sed 's/^/fresh /'
STAPES_CUDA_LT_SEARCH=1 STAPES_CUDA_LT_GRAPH_BELOW=20000000000 e vL $P q8 16 | sed 's/^/search+graph /'
STAPES_CUDA_LT_GRAPH_BELOW=20000000000 e vL $P q8 16 | sed 's/^/graph /'
STAPES_CUDA_LT_SEARCH=1 STAPES_CUDA_LT_GRAPH_BELOW=20000000000 timeout 40 /tmp/x/vL/stapes --verbose bench \
  --synthetic $P --device cuda --lane q8 --iters 5 --batch 16 > /tmp/t2/vl.txt 2> /tmp/t2/vl.err
grep -E "algorithm chosen" /tmp/t2/vl.err > $O/vl-picks.txt; grep -E "2240" $O/vl-picks.txt | head -12
unset STAPES_CUDA_LT_CACHE
echo "search done, elapsed $(el) s"
[ "$H200" = 1 ] && peers 580
echo "done, elapsed $(el) s"
