#!/usr/bin/env bash
# Stop 53, prepared: after a tests call on the same warm H200 (whisper.cpp built by wcpp_bg), ours (vM)
# beside PyTorch + graph and whisper.cpp in one run (tools/bench/gpu_compare.sh, 10 iterations).
# Carry dist/tools dist/rw1 (a part of the real weights, kept in /tmp/rw).
set -uo pipefail
mkdir -p /tmp/rw; for d in dist/rw[0-9]*; do [ -f "$d/part" ] && cp "$d/part" "/tmp/rw/${d#dist/rw}"; done
O=${OUT:-/tmp/out}; mkdir -p "$O"; exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
export STAPES_CACHE=/tmp/c2
[ -x /tmp/x/vM/stapes ] || { echo "h2: no /tmp/x/vM (not h1's machine)"; exit 3; }
STAPES=/tmp/x/vM/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/tools WCPP_BIN=/tmp/w/build/bin \
  timeout 560 bash tools/bench/gpu_compare.sh > $O/cmp.txt 2>&1
tail -34 $O/cmp.txt
(cd $O && tar -cJf cmp.tar.xz cmp && rm -rf cmp)
echo "done, elapsed $(el) s"
