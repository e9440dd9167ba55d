#!/usr/bin/env bash
# Stop 52 call 5: call 4 showed fc_sub_stem_tc never ran in the model (its features reach the
# stem in f32; the kernel took f16 inputs only). vS now splits an f32 input into two f16 halves
# too. Its tests (fc_subsample with the f32-input chain case), 16 clips / one clip / canary
# alternating against vD and vS with STAPES_CUDA_STEM_TC=0, and which stem kernel runs.
# Sized to the 262 s of device time left (pdl's PTX rules pass on the CPU; the stem is not in
# its block test). Carry dist/vD.tar.xz dist/vS.tar.xz.
set -uo pipefail
V=vS source tools/bench/device_env.sh
tar -xJf dist/vD.tar.xz -C /tmp/x
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=150
for b in fc_subsample conformer_ops cuda_parakeet cuda_canary parakeet_batch graphs; do t $b; done
echo "tests done, elapsed $(el) s"
timeout 60 ncu --kernel-name regex:"fc_sub_stem" --launch-count 1 --metrics gpu__time_duration.sum \
  $B/stapes bench --synthetic $P --device cuda --lane q8 --iters 1 2>/dev/null | grep -E "fc_sub_stem|duration"
off() { STAPES_CUDA_STEM_TC=0 e "$@"; }
for r in 1 2; do e vD $P q8 16; e vS $P q8 16; off vS $P q8 16 | sed 's/^/TC=0 /'; done
e vD $P q8; e vS $P q8; off vS $P q8 | sed 's/^/TC=0 /'
echo "done, elapsed $(el) s"
