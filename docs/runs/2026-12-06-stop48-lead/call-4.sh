#!/usr/bin/env bash
# Stop 48, call 4: the f16 norms' one shuffle chain. v122 = 563e386 + ln16_pass merging the
# lanes' (mean, M2) pairs (rows of 256·C, every lane's chunks whole: one shuffle chain of two
# values instead of two chains); v123 = the norms with no statistics at all (mean 0, scale 1:
# the load, scale and store alone; wrong results, a floor); v119 = the norms skipped (call 3);
# v116 = 563e386. 1. v122's tests; 2. turbo f16 one window and 16 parakeet q8 clips, alternating.
V=v122 source tools/bench/device_env.sh
for v in v116 v119 v123; do tar -xJf dist/$v.tar.xz -C /tmp/x; done
t ln_pair; t linear_add_norms; t fp8; t graphs; t f16_activations; t pdl
t cuda_parakeet; t cuda_canary; t cuda_gigaam; t cuda_whisper; t cuda_batch; t parakeet_batch
echo "elapsed $(el) s"
P=parakeet-tdt-0.6b-v2
for r in 1 2 3; do for v in v116 v122 v123 v119; do e $v whisper-large-v3-turbo f16; done; done
for r in 1 2; do for v in v116 v122 v123 v119; do e $v $P q8 16; done; done
for v in v116 v122; do e $v whisper-large-v3-turbo f16 16; e $v canary-1b-flash; done
echo "elapsed $(el) s"
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
