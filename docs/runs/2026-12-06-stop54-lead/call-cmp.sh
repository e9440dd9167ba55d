#!/usr/bin/env bash
# Stop 54, after call 1 on the same warm machine (whisper.cpp built by wcpp_bg, the bundles in
# /tmp/x): bundle $V (call 1's pick: vQ where its tests passed and it won the A/B, else vM)
# beside PyTorch + graph and whisper.cpp in one run (tools/bench/gpu_compare.sh, 10 iterations).
# Carry dist/tools and a dist/rwN part (kept in /tmp/rw).
set -uo pipefail
V=${V:-vQ}
mkdir -p /tmp/rw; for d in dist/rw[0-9]*; do [ -f "$d/part" ] && cp "$d/part" "/tmp/rw/${d#dist/rw}"; done
O=${OUT:-/tmp/out}; mkdir -p "$O"; exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
export STAPES_CACHE=/tmp/c2
[ -x /tmp/x/$V/stapes ] || { echo "cmp: no /tmp/x/$V (not call 1's machine)"; exit 3; }
[ -x /tmp/w/build/bin/whisper-bench ] || { echo "cmp: whisper.cpp not built"; tail -5 /tmp/wcmake.log; }
STAPES=/tmp/x/$V/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/tools WCPP_BIN=/tmp/w/build/bin \
  timeout ${CMP_LIMIT:-560} bash tools/bench/gpu_compare.sh > $O/cmp.txt 2>&1
tail -40 $O/cmp.txt
(cd $O && tar -cJf cmp.tar.xz cmp && rm -rf cmp)
ls -la /tmp/rw
echo "done, elapsed $(el) s"
