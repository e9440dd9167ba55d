#!/usr/bin/env bash
# Stop 47's prepared call (its call-next-not-run.sh) with this stop's bundle names: v115 = 563e386
# + stop 47's rel-ks-loader-untested.diff.txt (the split-keys rel-attention's cp.async loaders
# stepping their addresses by a constant; the plain form's chunk index unsigned), v116 = 563e386.
# 1. v115's tests over the rel-attention; 2. one q8 clip, v116 / v115 alternating, and 16 clips;
# 3. on an H200 (the targets' card), gpu_compare.sh on 563e386 for the target table.
V=v115 source tools/bench/device_env.sh
tar -xJf dist/v116.tar.xz -C /tmp/x
t conformer_ops; t fp8 rel_attention; t pdl; t cuda_parakeet; t cuda_canary
echo "elapsed $(el) s"
for r in 1 2; do for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do e v116 $m; e v115 $m; done
  e v116 parakeet-tdt-0.6b-v2 q8 16; e v115 parakeet-tdt-0.6b-v2 q8 16; done
echo "elapsed $(el) s"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  MODELS="whisper-large-v3-turbo parakeet-tdt-0.6b-v2 canary-1b-flash" STAPES=/tmp/x/v116/stapes OUT=/tmp/o/cmp \
    ITERS=10 TOOLS=dist/tools timeout 200 bash tools/bench/gpu_compare.sh
fi
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
