#!/usr/bin/env bash
# Stop 36 call 4: build v71 = v70 + glu_depthwise_act_feeding (the conv module's middle also
# writes pw2's e4m3 input). Its tests, then parakeet/canary q8 one clip and 16 clips, FEED_E4M3 off/on
# alternating, one tuning cache. Carry dist/v71.tar.xz dist/au dist/run36.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b71
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v71.tar.xz -C $B && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
t() { s=$(date +%s); timeout ${T:-240} $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED" -A2 /tmp/t2/$1.log | head -20; [ $rc -ne 0 ] && cp /tmp/t2/$1.log $O/; }
for x in fp8 conformer_ops cuda_parakeet cuda_canary parakeet_batch; do t $x; done
date -u
q() { python3 -c 'import json,sys; d=json.load(sys.stdin); r=d["report"]; g=lambda k: (r.get(k) or {}).get("median_ms") if isinstance(r.get(k),dict) else r.get(k); print("enc_dev %.4f" % g("encode_device"), "batch16 %s" % g("encode_batched"))'; }
b() { STAPES_CUDA_FEED_E4M3=$2 timeout 120 $B/stapes bench --synthetic $1 --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --batch 16 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
b parakeet-tdt-0.6b-v2 1 >/dev/null
for r in 1 2 3; do for e in 0 1; do echo "parakeet q8 feed_e4m3=$e r$r: $(b parakeet-tdt-0.6b-v2 $e)"; done; done
for r in 1; do for e in 0 1; do echo "canary q8 feed_e4m3=$e r$r: $(b canary-1b-flash $e)"; done; done
date -u
# ncu: one parakeet q8 encode of 16 clips (tuned above), every kernel's duration
timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --launch-count 3000 \
  $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane q8 --audio samples/jfk.wav --iters 1 --batch 16 > /tmp/t2/ncu.csv 2>/tmp/t2/ncu.err
echo "ncu rc=$? rows $(grep -c gpu__time_duration /tmp/t2/ncu.csv)"; tail -2 /tmp/t2/ncu.err
xz -c /tmp/t2/ncu.csv > $O/ncu-parakeet16-q8.csv.xz
date -u
