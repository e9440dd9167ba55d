#!/usr/bin/env bash
# Stop 57, call 6: PACK = dist/c6/all.tar.xz (pack_bundles.sh c6 vK): vK = 7255708, glu_dw_act's
# 4-channel form on by default (STAPES_CUDA_GDW_QUAD=0 takes a channel a thread). Its tests (the
# new conformer_ops test: the two forms' bits equal), the family tests, the A/B alternating
# (16 parakeet clips q8 and f16, one clip of parakeet, canary and GigaAM), and ncu's sections
# for one 16-clip glu_dw_act launch in the new form. Carry dist/c6 dist/tools.
set -uo pipefail
PACK=dist/c6/all.tar.xz V=vK source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=150
for b in conformer_ops cuda_parakeet cuda_canary cuda_gigaam parakeet_batch gigaam_batch graphs pdl fp8; do t $b; done
echo "tests done, elapsed $(el) s"
q() { STAPES_CUDA_GDW_QUAD=$1 "${@:2}" | sed "s/^/quad=$1 /"; }
for r in 1 2 3; do for m in 0 1; do q $m e vK $P q8 16; done; done
for r in 1 2; do for m in 0 1; do q $m e vK $P q8; done; done
for m in 0 1; do q $m e vK $P f16 16; done
for m in 0 1; do E_ITERS=10 q $m e vK canary-1b-flash q8; done
for m in 0 1; do q $m e vK gigaam-v3-ctc q8; done
echo "bench done, elapsed $(el) s"
timeout 120 ncu --set full -k glu_dw_act --launch-skip 250 --launch-count 1 $B/stapes bench --synthetic $P --device cuda --lane q8 --batch 16 --iters 1 > /tmp/o/ncu-glu-quad.txt 2>&1
echo "=== ncu glu_dw_act rc=$? elapsed $(el)"; cp /tmp/o/ncu-glu-quad.txt $O/
grep -E "^  glu_dw_act|Duration|Issue Slots Busy|Executed Instructions  |Eligible Warps|Achieved Occupancy|Registers Per" /tmp/o/ncu-glu-quad.txt | head -12
echo "done, elapsed $(el) s"
