#!/usr/bin/env bash
# Stop 29 call 4: build v36 = v35 with 4 slices by default, and the attention's output projection
# and the conv module's pw2 (K = 1024) also through linear_add_norms, split where
# STAPES_CUDA_SPLIT_LN_MIN_K <= 1024 (default 2048: fc2 only). Tests; A/B in one binary on one
# tuning cache, alternating three rounds: composed (SPLIT_LN=0), fc2 only (MIN_K 2048), fc2 +
# out + pw2 (MIN_K 1024); then gpu_compare.sh for parakeet and canary (f16 and q8, ITERS=10,
# torch_anchor.py beside) with the faster of the two split settings.
# Carry dist/v36 dist/au2 dist/f1/tools dist/run29.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v36/bins.tar.xz -C $B && tar -xJf dist/v36/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for t in linear_add_norms conformer_ops cuda_parakeet cuda_canary parakeet_batch; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$t.log | head -12; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
STAPES_CUDA_SPLIT_LN_MIN_K=1024 timeout 150 $B/cuda_parakeet --test-threads=1 > /tmp/t2/p1024.log 2>&1; echo "=== cuda_parakeet MIN_K=1024 rc=$? $(grep -E '^test result' /tmp/t2/p1024.log | tail -1)"
STAPES_CUDA_SPLIT_LN_MIN_K=1024 timeout 150 $B/cuda_canary --test-threads=1 > /tmp/t2/c1024.log 2>&1; echo "=== cuda_canary MIN_K=1024 rc=$? $(grep -E '^test result' /tmp/t2/c1024.log | tail -1)"
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
run() { STAPES_CUDA_SPLIT_LN=$1 STAPES_CUDA_SPLIT_LN_MIN_K=$2 $B/stapes bench --synthetic $3 --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
M="parakeet-tdt-0.6b-v2 canary-1b-flash"
for m in $M; do echo "warm $m: $(run 4 1024 $m) / $(run 0 2048 $m)"; done
for r in 1 2 3; do
  for m in $M; do
    for c in "0 2048" "4 2048" "4 1024"; do
      echo "$m f16 split,min_k=$c round $r (encode, encode_device, 16): $(run $c $m)" | tee -a /tmp/t2/ab.txt
    done
  done
done
K=$(python3 - <<'PY'
import re
s={}
for l in open('/tmp/t2/ab.txt'):
    m=re.match(r'(\S+) f16 split,min_k=4 (\d+) round \d .*: (\S+) (\S+) (\S+)', l)
    if m and m.group(1).startswith('parakeet'): s.setdefault(m.group(2),[]).append(float(m.group(4)))
print(min(s, key=lambda k: sum(s[k])/len(s[k])))
PY
)
echo "gpu_compare with STAPES_CUDA_SPLIT_LN_MIN_K=$K"
date -u
STAPES_CUDA_SPLIT_LN_MIN_K=$K STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/f1/tools MODELS="parakeet-tdt-0.6b-v2 canary-1b-flash" bash tools/bench/gpu_compare.sh > /tmp/t2/cmp.txt 2>&1
grep -iE "parakeet|canary|ceiling|torch" /tmp/t2/cmp.txt | head -30
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd - > /dev/null && rm -rf $O/cmp
date -u
