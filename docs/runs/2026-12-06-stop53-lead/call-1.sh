#!/usr/bin/env bash
# Stop 53, call 1: the first of two back-to-back calls on one warm H200.
# vM = main's head restaged with tools/bench/stage_device.sh vM "fp8 ln_pair conformer_ops graphs
# fc_subsample cuda_parakeet cuda_canary parakeet_batch q8_accuracy cuda_whisper pdl"
# (scripts/fetch-models.sh audio first). On an H200 whisper.cpp builds in the background
# (wcpp_bg, tools/bench/device_env.sh) while main's GPU tests run; on an H100 only the tests run.
# Carry dist/vM.tar.xz dist/tools dist/wcpp.tar.xz dist/rw6 (a part of the real weights, kept in /tmp/rw).
set -uo pipefail
mkdir -p /tmp/rw; for d in dist/rw[0-9]*; do [ -f "$d/part" ] && cp "$d/part" "/tmp/rw/${d#dist/rw}"; done
V=vM source tools/bench/device_env.sh
wcpp_bg
TEST_LIMIT=150
for b in fp8 ln_pair conformer_ops graphs fc_subsample cuda_parakeet cuda_canary parakeet_batch q8_accuracy cuda_whisper pdl; do t $b; done
echo "tests done, elapsed $(el) s"
if [ -n "$WB" ]; then wait $WB; tail -3 /tmp/wcmake.log; ls -la /tmp/w/build/bin/ | grep whisper; fi
echo "done, elapsed $(el) s"
