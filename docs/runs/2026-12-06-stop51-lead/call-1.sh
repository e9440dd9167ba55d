#!/usr/bin/env bash
# Stop 51 call 1: stop 50's prepared call (docs/runs/2026-12-06-stop50-lead/call-next-not-run.sh:
# the ln_pair e4m3 store and the two-warpgroup fc1, bundles vA = 941d3ad, vP, vW, vPW staged as
# its header says, vPW with the family tests' clips), then, on an H200 only, every family beside
# PyTorch + graph (tools/bench/gpu_compare.sh on vA, main). Carry dist/c51 dist/tools.
set -uo pipefail
bash docs/runs/2026-12-06-stop50-lead/call-next-not-run.sh
O=${OUT:-/tmp/out}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  STAPES=/tmp/x/vA/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/tools timeout 240 bash tools/bench/gpu_compare.sh > $O/cmp.txt 2>&1
  tail -30 $O/cmp.txt
fi
