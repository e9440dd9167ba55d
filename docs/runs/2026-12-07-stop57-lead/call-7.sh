#!/usr/bin/env bash
# Stop 57, call 7: PACK = dist/c7/all.tar.xz (pack_bundles.sh c7 vL): vL = glu_dw_act copying its
# block's taps into shared memory (STAPES_CUDA_GDW_WS=0 reads them from global memory, a channel
# a thread: call 5's ncu found 79 % of the kernel's global sectors wasted). Its tests (the new
# conformer_ops test: both forms' bits equal), the family tests, the A/B alternating.
# Carry dist/c7 dist/tools.
set -uo pipefail
PACK=dist/c7/all.tar.xz V=vL source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=100
for b in conformer_ops cuda_parakeet cuda_canary cuda_gigaam parakeet_batch gigaam_batch; do t $b; done
echo "tests done, elapsed $(el) s"
q() { STAPES_CUDA_GDW_WS=$1 "${@:2}" | sed "s/^/ws=$1 /"; }
for r in 1 2 3; do for m in 0 1; do q $m e vL $P q8 16; done; done
for r in 1 2; do for m in 0 1; do q $m e vL $P q8; done; done
for m in 0 1; do q $m e vL gigaam-v3-ctc q8; done
echo "done, elapsed $(el) s"
