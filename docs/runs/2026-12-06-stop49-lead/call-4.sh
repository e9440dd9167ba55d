#!/usr/bin/env bash
# What the f16 copies cost that the q8 lane's passes write beside their e4m3 form (the FP8 GEMM
# after each reads only the e4m3 one at 16 clips). Ablations over ac1a2af, results wrong where a
# reader wanted the f16 copy: vFn the feeding norms, vFa act_e4m3 + glu_dw_act, vFr the
# rel-attention, vF all three; vA = main. On an H200 it first runs gpu_compare.sh on main.
# Carry dist/c49b (one solid xz of the five bundles) and dist/tools.
set -uo pipefail
mkdir -p /tmp/stage
xz -dc dist/c49b/all.tar.xz | tar -C /tmp/stage -xf -
for v in vA vF vFn vFa vFr; do tar -C /tmp/stage -cf - $v | xz -0 -T0 > dist/$v.tar.xz; done
V=vA source tools/bench/device_env.sh
for v in vF vFn vFa vFr; do tar -xJf dist/$v.tar.xz -C /tmp/x; done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  MODELS="whisper-large-v3-turbo parakeet-tdt-0.6b-v2 canary-1b-flash" STAPES=$B/stapes \
    OUT=/tmp/o/cmp ITERS=20 TOOLS=dist/tools timeout 300 bash tools/bench/gpu_compare.sh
  tar -C /tmp/o -cJf $O/cmp.tar.xz cmp
  echo "elapsed $(el) s"
fi
P=parakeet-tdt-0.6b-v2
for v in vA vF vFn vFa vFr; do E_ITERS=2 e $v $P q8 16; done
echo "warm, elapsed $(el) s"
for r in 1 2 3; do for v in vA vF vFn vFa vFr; do e $v $P q8 16; done; done
for r in 1 2; do for v in vA vF; do e $v $P; e $v canary-1b-flash; done; done
echo "done, elapsed $(el) s"
