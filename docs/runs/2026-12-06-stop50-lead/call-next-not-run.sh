#!/usr/bin/env bash
# Prepared at stop 50, not run (a start failed and the device time left could not start another):
# the norm pair writes the next block's fc1 input as e4m3. Call 5's profile: at
# 16 clips every block boundary ran `ln_pair_rows16` (f16 y and z) then a `quant_fp8` pass of
# z for fc1 (4.0-4.3 µs a layer). vP = 3e0adb4 + `ln_pair_rows16` storing z's e4m3 rows where
# `next` runs on FP8; vG = call 4's build (3e0adb4 on its defaults).
# Stage (fresh names if these are used; vG is main's crates, 3e0adb4):
#   git apply docs/runs/2026-12-06-stop50-lead/ln-pair-e4m3-untested.diff.txt
#   tools/bench/stage_device.sh vP "fp8 ln_pair linear_add_norms conformer_ops cuda_parakeet
#   cuda_canary cuda_gigaam parakeet_batch graphs pdl cuda_fc_shapes";
#   git checkout crates/; tools/bench/stage_device.sh vG ""
#   tools/bench/pack_bundles.sh c50e vG vP   (carry dist/c50e)
# 1. the tests, fp8_norm_pair_writes_the_next_gemms_input among them (2240 x 1024, 603 x 272,
#    40 x 384: both norms and the linear after them bit-equal to the pair without `next` + the
#    linear's own conversion, eager == replay, no conversion pass counted); 2. 16 parakeet
#    clips vG against vP, alternating; one clip. Expected: ~0.1 ms at 16 clips (23 quant_fp8
#    passes of ~4.2 µs under ncu), nothing at one clip (its split form writes e4m3 already).
set -uo pipefail
V=vP PACK=dist/c50e/all.tar.xz source tools/bench/device_env.sh
for b in fp8 ln_pair linear_add_norms conformer_ops cuda_parakeet cuda_canary cuda_gigaam parakeet_batch graphs pdl cuda_fc_shapes; do t $b; done
grep -h "fp8_norm_pair" /tmp/o/fp8.log
mkdir -p $O/tests; cp /tmp/o/*.log $O/tests/
echo "elapsed $(el) s"
P=parakeet-tdt-0.6b-v2
E_ITERS=2 e vP $P q8 16 >/dev/null; E_ITERS=2 e vG $P q8 16 > /dev/null
for r in 1 2 3; do e vG $P q8 16; e vP $P q8 16; done
e vG $P; e vP $P; e vG canary-1b-flash; e vP canary-1b-flash
echo "done, elapsed $(el) s"
