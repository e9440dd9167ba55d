#!/usr/bin/env bash
# Stop 51 h2 (after h1 on the same warm H200): every family, ours (main, vM) beside PyTorch + graph
# and whisper.cpp (whisper-bench, flash attention on, random ggml weights of the same shapes) in
# one run: tools/bench/gpu_compare.sh. Carry a dist/rwN (stage_real_weights.sh).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
mkdir -p /tmp/rw; for d in dist/rw[0-9]*; do [ -f "$d/part" ] && cp "$d/part" "/tmp/rw/${d#dist/rw}"; done
export STAPES_CACHE=/tmp/c2
[ -x /tmp/x/vM/stapes ] || { echo "h2: no /tmp/x/vM (not h1's machine)"; exit 3; }
STAPES=/tmp/x/vM/stapes OUT=$O/cmp ITERS=20 TOOLS=dist/tools WCPP_BIN=/tmp/w/build/bin \
  timeout 560 bash tools/bench/gpu_compare.sh > $O/cmp.txt 2>&1
tail -32 $O/cmp.txt
echo "done, elapsed $(el) s"
