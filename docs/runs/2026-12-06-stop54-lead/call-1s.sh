#!/usr/bin/env bash
# Stop 54, call 1 shortened (call-1.sh without whisper.cpp and the comparison: the device time
# left after the starts that found no machine). PACK = dist/c1/all.tar.xz (pack_bundles.sh c1 vM
# vR vQ; the bundles as call-1.sh says). vQ's GPU tests (fp8 and the rel-attention's first: stop
# 53's new fp8 test has not fully run on a GPU; cuda_canary and pdl last), vR's rel-attention
# test, then 16 parakeet clips vM / vQ / vR / vQ at 3 warps (STAPES_CUDA_REL_WARPS), alternating,
# two rounds; one clip and canary vM / vQ.
# Carry dist/c1.
set -uo pipefail
PACK=dist/c1/all.tar.xz V=vQ source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=120
for b in fp8 conformer_ops cuda_parakeet parakeet_batch; do t $b; done
B=/tmp/x/vR; t conformer_ops rel_attention -vR; B=/tmp/x/vQ
echo "tests done, elapsed $(el) s"
rw() { export STAPES_CUDA_REL_WARPS=$1; echo -n "warps=$1 "; shift; "$@"; unset STAPES_CUDA_REL_WARPS; }
for r in 1 2; do e vM $P q8 16; e vQ $P q8 16; e vR $P q8 16; rw 3 e vQ $P q8 16; done
e vM $P q8; e vQ $P q8
E_ITERS=10 e vM canary-1b-flash q8; E_ITERS=10 e vQ canary-1b-flash q8
echo "bench done, elapsed $(el) s"
for b in cuda_canary pdl; do t $b; done
echo "done, elapsed $(el) s"
