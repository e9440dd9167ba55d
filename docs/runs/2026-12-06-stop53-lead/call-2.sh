#!/usr/bin/env bash
# Stop 53 call 2: vN = 20ebbf6 + the last norm of `feeding_add_norms` left as e4m3 rows alone
# where the next linear on FP8 is its only reader (`Feeds::only`; STAPES_CUDA_NORM_E4M3_ONLY=0
# turns it off, which is main's behaviour). Its GPU tests (fp8's new
# fp8_norm_feeding_only_writes_e4m3_alone among them), then 16 parakeet clips on / off
# alternating, three rounds, and one clip, canary and turbo on / off. On an H200 whisper.cpp
# builds beside the tests (wcpp_bg) for a comparison call after. Carry dist/vN.tar.xz
# dist/tools dist/wcpp.tar.xz.
set -uo pipefail
V=vN source tools/bench/device_env.sh
wcpp_bg
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=150
for b in fp8 ln_pair linear_add_norms conformer_ops graphs cuda_parakeet cuda_canary parakeet_batch gigaam_batch cuda_gigaam q8_accuracy cuda_whisper pdl cuda_batch; do t $b; done
echo "tests done, elapsed $(el) s"
off() { export STAPES_CUDA_NORM_E4M3_ONLY=0; "$@"; unset STAPES_CUDA_NORM_E4M3_ONLY; }
for r in 1 2 3; do w e vN $P q8 16; w off e vN $P q8 16; done
for r in 1 2; do e vN $P q8; off e vN $P q8; done
E_ITERS=10 e vN canary-1b-flash q8; E_ITERS=10 off e vN canary-1b-flash q8
E_ITERS=10 e vN canary-1b-flash q8 16; E_ITERS=10 off e vN canary-1b-flash q8 16
e vN whisper-large-v3-turbo f16; e vN whisper-large-v3-turbo q8
echo "bench done, elapsed $(el) s"
if [ -n "$WB" ]; then wait $WB; tail -3 /tmp/wcmake.log; ls -la /tmp/w/build/bin/ | grep whisper; fi
echo "done, elapsed $(el) s"
