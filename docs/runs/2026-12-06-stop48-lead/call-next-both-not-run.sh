#!/usr/bin/env bash
# The two prepared calls in one lease (one cold start, ~2-4 min of device time): stage the
# bundles both headers name (vA = main, vN vn vR vr vG vg from call-next-not-run.sh, vB from
# call-next-2-not-run.sh; ~57 MB, under the 64 MiB carry), carry all eight dist/*.tar.xz, run
#   bash docs/runs/2026-12-06-stop48-lead/call-next-both-not-run.sh
# On an H200 (the targets' card) it also runs gpu_compare.sh on main for the target table
# (carry dist/tools too: cp -r ../shared/tools dist/tools).
set -uo pipefail
D=docs/runs/2026-12-06-stop48-lead
bash $D/call-next-2-not-run.sh
unset STAPES_X_REL_BD
OUT=${OUT:-/tmp/out}/zero bash $D/call-next-not-run.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ -d dist/tools ]; then
  MODELS="whisper-large-v3-turbo parakeet-tdt-0.6b-v2 canary-1b-flash" STAPES=/tmp/x/vA/stapes \
    OUT=/tmp/o/cmp ITERS=10 TOOLS=dist/tools timeout 250 bash tools/bench/gpu_compare.sh
  tar -C /tmp/o -cJf ${OUT:-/tmp/out}/cmp.tar.xz cmp
fi
