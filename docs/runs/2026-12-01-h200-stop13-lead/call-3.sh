#!/usr/bin/env bash
# Stop 13 call 3: the peer comparison (ours + PyTorch) with call 2's binaries, no build running beside it.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
exec > >(tee -a "$L") 2>&1
export STAPES_CACHE=/tmp/scache B=/tmp/b
mkdir -p /tmp/b /tmp/scache /tmp/m /tmp/cmp
tar -xJf dist/c2/bins.tar.xz -C /tmp/b && tar -xJf dist/c2/cache.tar.xz -C /tmp/scache
xz -dc dist/c1/tiny.bin.xz > /tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
STAPES=$B/stapes OUT=/tmp/cmp ITERS=20 TOOLS=dist/c2/tools bash tools/bench/gpu_compare.sh
date -u
bj() { "$B/stapes" bench --synthetic "$1" --device cuda --lane "$2" --audio samples/jfk.wav --iters 20 --batch 16 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
d={k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v}
d.update({k:round(v,3) for k,v in r.get("extra",{}).items()})
print(sys.argv[1], d)' "$3 $1 $2" || echo "$3 $1 $2 FAILED"; }
STAPES_CUDA_PDL=0 bj parakeet-tdt-0.6b-v2 f16 pdl-off
bj parakeet-tdt-0.6b-v2 f16 default-again
STAPES_CUDA_PDL=0 STAPES_CUDA_CROSS_F16=0 STAPES_CUDA_SELECT_SPLIT=0 bj whisper-large-v3-turbo f16 three-off
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s.%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/jfk.txt 2>&1; echo "jfk tiny.en stapes $l whole process $(echo "$(date +%s.%N) - $s" | bc) s"; done; cat /tmp/jfk.txt; done
tar -cJf $O/cmp.tar.xz -C /tmp cmp
date -u
