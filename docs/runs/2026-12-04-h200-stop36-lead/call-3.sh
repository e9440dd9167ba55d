#!/usr/bin/env bash
# Stop 36 call 3: build v70 = fa5c807 + linear_act_feeding (the SiLU pass also writes fc2's
# e4m3 input). Its tests, then parakeet/canary q8 one clip and 16 clips, ACT_E4M3 off/on
# alternating, one tuning cache. Carry dist/v70.tar.xz dist/au dist/run36.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b70
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v70.tar.xz -C $B && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
t() { s=$(date +%s); timeout ${T:-240} $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED" -A2 /tmp/t2/$1.log | head -20; [ $rc -ne 0 ] && cp /tmp/t2/$1.log $O/; }
for x in fp8 cuda_parakeet cuda_canary parakeet_batch linear_add_norms; do t $x; done
date -u
q() { python3 -c 'import json,sys; d=json.load(sys.stdin); r=d["report"]; g=lambda k: (r.get(k) or {}).get("median_ms") if isinstance(r.get(k),dict) else r.get(k); print("enc_dev %.4f" % g("encode_device"), "batch16 %.3f" % g("encode_batched"))'; }
b() { STAPES_CUDA_ACT_E4M3=$2 timeout 120 $B/stapes bench --synthetic $1 --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --batch 16 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
b parakeet-tdt-0.6b-v2 1 >/dev/null
for r in 1 2 3; do for e in 0 1; do echo "parakeet q8 act_e4m3=$e r$r: $(b parakeet-tdt-0.6b-v2 $e)"; done; done
for r in 1 2; do for e in 0 1; do echo "canary q8 act_e4m3=$e r$r: $(b canary-1b-flash $e)"; done; done
date -u
