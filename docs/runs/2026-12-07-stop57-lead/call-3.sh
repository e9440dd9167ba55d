#!/usr/bin/env bash
# Stop 57, call 3: PACK = dist/c3/all.tar.xz (tools/bench/pack_bundles.sh c3 vJ): vJ = vI's code
# with cuda_parakeet's q8 test past 512 rows as a batch (call 2 gave it one long input, which
# runs outside the captured chain on f32 activations, where FP8 never runs). On an H100 that
# test file alone; on an H200 vJ's GPU tests, 16 clips in both hidden forms, and the comparison
# (stop 54's call-cmp.sh) beside PyTorch + graph and whisper.cpp (wcpp_bg), the call that issue
# 4 asks for. Carry dist/c3 dist/tools dist/wcpp.tar.xz.
set -uo pipefail
PACK=dist/c3/all.tar.xz V=vJ source tools/bench/device_env.sh
wcpp_bg
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=150
t cuda_parakeet
grep -E "hidden" /tmp/o/cuda_parakeet.log | head -4
if [ $H200 = 1 ]; then
  for b in cuda_whisper graphs q8_accuracy parakeet_batch cuda_canary fp8; do t $b; done
  echo "tests done, elapsed $(el) s"
  h() { STAPES_CUDA_HIDDEN_E4M3=$1 "${@:2}" | sed "s/^/hidden=$1 /"; }
  for r in 1 2; do for m in 0 lut; do h $m e vJ $P q8 16; done; done
fi
if [ -n "$WB" ]; then wait $WB; tail -3 /tmp/wcmake.log; ls -la /tmp/w/build/bin/ | grep whisper; fi
[ $H200 = 1 ] && CMP_LIMIT=$(( 585 - $(el) )) V=vJ bash docs/runs/2026-12-06-stop54-lead/call-cmp.sh > /dev/null  # it appends to log.txt itself
[ $H200 = 1 ] && tail -42 $O/cmp.txt
echo "done, elapsed $(el) s"
