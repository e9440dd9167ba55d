#!/usr/bin/env bash
# Main (vA, ac1a2af) on whatever card comes: the target table beside PyTorch+graph
# (gpu_compare.sh, same call), then each target's clock and power under load (`w`): call 1 put
# turbo f16 at the 700 W cap (1875 MHz, 690 W) while its zero-fed forms ran at 1980 MHz.
# Carry dist/c49 (all.tar.xz) and dist/tools (cp -r ../shared/tools dist/tools).
set -uo pipefail
mkdir -p /tmp/stage /tmp/stage2
xz -dc dist/c49/all.tar.xz | tar -C /tmp/stage -xf - vA
mv /tmp/stage/vA/b /tmp/stage2/vA && tar -C /tmp/stage2 -cf - vA | xz -0 -T0 > dist/vA.tar.xz
V=vA source tools/bench/device_env.sh
MODELS="whisper-large-v3-turbo parakeet-tdt-0.6b-v2 canary-1b-flash" STAPES=$B/stapes \
  OUT=/tmp/o/cmp ITERS=20 TOOLS=dist/tools timeout 300 bash tools/bench/gpu_compare.sh
echo "elapsed $(el) s"
P=parakeet-tdt-0.6b-v2
E_ITERS=1000 w e vA $P q8
E_ITERS=1000 w e vA canary-1b-flash q8
E_ITERS=200 w e vA $P q8 16
E_ITERS=300 w e vA whisper-large-v3-turbo f16
E_ITERS=20 w e vA whisper-large-v3-turbo f16 16
E_ITERS=300 w e vA whisper-large-v3-turbo q8
nvidia-smi --query-gpu=clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader
tar -C /tmp/o -cJf $O/cmp.tar.xz cmp
echo "done, elapsed $(el) s"
