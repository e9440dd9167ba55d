#!/usr/bin/env bash
# Stop 50, call 1 (prepared at stop 49): `feeding_add_norms`,
# the FastConformer's three passes before a linear (the SiLU pass, glu_dw_act, the
# rel-attention) and the `linear_add_norms` after each as one op, so that where that linear runs
# on FP8 in the composed form the pass writes only its e4m3 copy (call 4's ablation: −0.26 ms at
# 16 clips, of which these three passes are ~0.2; the feeding norms' copy is not in it).
# Stage (fresh names if these are used):
#   git apply docs/runs/2026-12-06-stop49-lead/feeding-add-norms-untested.diff.txt
#   tools/bench/stage_device.sh vE "fp8 conformer_ops cuda_parakeet cuda_canary cuda_gigaam parakeet_batch graphs pdl"
#   git checkout crates/; tools/bench/stage_device.sh vA ""
#   tools/bench/pack_bundles.sh c50 vA vE                  (carry dist/c50 and dist/tools;
#   on an H200 it then runs gpu_compare.sh on main)
# 1. vE's tests: fp8's fp8_feeding_add_norms_writes_e4m3_only (each pass at 600 and 2240 rows:
#    the sum and both norms bit-equal to the pass's `_feeding` op + `linear_add_norms`, eager
#    == replay, the counter proving the e4m3-only form ran; at 140 rows of 1024 channels (the
#    split form) and with STAPES_CUDA_E4M3_ONLY off it does not run), then the family tests.
# 2. 16 parakeet q8 clips, vA against vE and vE with the switch off, alternating; one clip.
set -uo pipefail
V=vE PACK=dist/c50/all.tar.xz source tools/bench/device_env.sh
t fp8; t conformer_ops; t cuda_parakeet; t cuda_canary; t cuda_gigaam; t parakeet_batch; t graphs; t pdl
mkdir -p $O/tests; cp /tmp/o/*.log $O/tests/
echo "elapsed $(el) s"
P=parakeet-tdt-0.6b-v2
for r in 1 2 3; do
  e vA $P q8 16; e vE $P q8 16; STAPES_CUDA_E4M3_ONLY=0 e vE $P q8 16
done
e vA $P; e vE $P; e vA canary-1b-flash; e vE canary-1b-flash
echo "done, elapsed $(el) s"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  MODELS="whisper-large-v3-turbo parakeet-tdt-0.6b-v2 canary-1b-flash" STAPES=/tmp/x/vA/stapes \
    OUT=/tmp/o/cmp ITERS=20 TOOLS=dist/tools timeout $(( 560 - $(el) )) bash tools/bench/gpu_compare.sh
  tar -C /tmp/o -cJf $O/cmp.tar.xz cmp
  echo "elapsed $(el) s"
fi
