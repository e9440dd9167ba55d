#!/usr/bin/env bash
# Stop 28 call 3: the SM clock, power and clock-event reasons (nvidia-smi every 20 ms) while build
# v30's bench runs turbo f16 one window for ~9 s (2000 encodes), then 16 windows (3 runs), then
# parakeet one clip (2000 encodes). Question: does the GEMM-heavy encode run at the full clock?
# Carry dist/v30 dist/run28.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE
tar -xJf dist/v30/bins.tar.xz -C $B stapes && tar -xJf dist/v30/cache.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.applications.graphics --format=csv
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active --format=csv,noheader -lms 20 > $O/smi.csv 2>&1 &
P=$!
sleep 1
mark() { echo "MARK $(date -u +%H:%M:%S.%3N) $*" | tee -a $O/marks.txt; }
mark turbo-1w-start
$B/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 2000 --batch 1 --decode-tokens 1 --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print("turbo", r["encode"]["median_ms"], r["encode_device"]["median_ms"])'
mark turbo-1w-end
for i in 1 2 3; do
  mark turbo-16w-run$i
  $B/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 10 --batch 16 --decode-tokens 1 --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print("turbo16", r["encode_batched"]["median_ms"])'
done
mark parakeet-start
$B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 2000 --batch 1 --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print("parakeet", r["encode"]["median_ms"], r["encode_device"]["median_ms"])'
mark parakeet-end
sleep 1; kill $P
wc -l $O/smi.csv
python3 - $O/smi.csv <<'PY'
import sys, collections
rows=[l.strip().split(", ") for l in open(sys.argv[1]) if l.count(",")>=6]
# print a coarse histogram of SM clock by power band
c=collections.Counter()
for r in rows:
    try: sm=int(r[1].split()[0]); pw=float(r[3].split()[0])
    except: continue
    c[(sm//50*50, int(pw//50*50), r[6])]+=1
for k,v in sorted(c.items()): print(k, v)
PY
