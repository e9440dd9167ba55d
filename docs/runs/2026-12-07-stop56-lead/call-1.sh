#!/usr/bin/env bash
# Stop 56, call 1: the first of back-to-back calls on one warm machine. PACK = dist/c1/all.tar.xz
# (tools/bench/pack_bundles.sh c1 vM), vM = main's head. whisper.cpp builds in the background
# (wcpp_bg) while vM's GPU tests run; then a few 16-clip settings (the rel-attention's forms and
# warps) for the next change; then the comparison (stop 54's call-cmp.sh) with vM: ours beside
# PyTorch + graph and whisper.cpp in one run. Carry dist/c1 dist/tools dist/wcpp.tar.xz.
set -uo pipefail
PACK=dist/c1/all.tar.xz V=vM source tools/bench/device_env.sh
WCPP_ANY=1 WCPP_LIMIT=420 wcpp_bg
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=150
for b in fp8 conformer_ops cuda_parakeet parakeet_batch cuda_canary ln_pair graphs fc_subsample q8_accuracy cuda_whisper pdl; do t $b; done
echo "tests done, elapsed $(el) s"
rw() { export STAPES_CUDA_REL_WARPS=$1; echo -n "warps=$1 "; shift; "$@"; unset STAPES_CUDA_REL_WARPS; }
for r in 1 2; do e vM $P q8 16; rw 5 e vM $P q8 16; STAPES_CUDA_REL_ATTN_KS=1 e vM $P q8 16; done
w e vM $P q8 16
E_ITERS=10 w e vM whisper-large-v3-turbo f16; E_ITERS=10 w e vM whisper-large-v3-turbo q8
echo "bench done, elapsed $(el) s"
if [ -n "$WB" ]; then wait $WB; tail -3 /tmp/wcmake.log; ls -la /tmp/w/build/bin/ | grep whisper; fi
CMP_LIMIT=$(( 585 - $(el) )) V=vM bash docs/runs/2026-12-06-stop54-lead/call-cmp.sh > /dev/null  # it appends to log.txt itself
tail -42 $O/cmp.txt
echo "done, elapsed $(el) s"
