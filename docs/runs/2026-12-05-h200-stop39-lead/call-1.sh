#!/usr/bin/env bash
# Stop 39 call 1 (v77 = main ee1016e: stapes, conformer_ops, cuda_gigaam, cuda_whisper, cuda_batch;
# v78 = ee1016e + heads under 64 on flash64: stapes, attention, cuda_gigaam).
# whisper.cpp 233fe1f built into the ignored wcpp/ in the background (kept for call 2 on the same
# warm machine, with v77 unpacked under /tmp/x); meanwhile ee1016e's CUDA tests on the fixtures
# (conformer_ops: the shared rotary_half check; cuda_gigaam) and where GigaAM's 3.4 ms goes (ncu,
# every kernel of one q8 encode inside the bench), then where one parakeet clip goes at this head.
# Then v78's tests and GigaAM's encode, v77 against v78, alternating.
# Carry dist/v77.tar.xz dist/v78.tar.xz dist/au dist/wc dist/tools dist/giga.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2
mkdir -p $STAPES_CACHE /tmp/t2 /tmp/x /tmp/keep wcpp
S0=$(date +%s); date -u
tar -xJf dist/wc/wcpp.tar.xz -C wcpp
setsid nohup bash -c 'cd wcpp/wcpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > ../cfg.log 2>&1 && timeout 540 cmake --build build -j 13 --target whisper-bench whisper-cli > ../build.log 2>&1; echo "wcpp build rc=$? at $(date -u +%T)" > ../done' > /dev/null 2>&1 < /dev/null &
tar -xJf dist/v77.tar.xz -C /tmp/x && tar -xJf dist/v78.tar.xz -C /tmp/x && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
cp -r dist/tools dist/giga /tmp/keep/
B=/tmp/x/v77
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { d=$1; n=$2; s=$(date +%s); timeout 200 /tmp/x/$d/$n --test-threads=1 --nocapture > /tmp/t2/$d-$n.log 2>&1; rc=$?
  echo "=== $d $n rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$d-$n.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|rel L2|planted" /tmp/t2/$d-$n.log | head -14; cp /tmp/t2/$d-$n.log $O/; }
t v77 conformer_ops
t v78 attention
t v78 cuda_gigaam
date -u
for r in 1 2 3; do for v in v77 v78; do for l in q8 f16; do
  /tmp/x/$v/stapes bench --synthetic gigaam-v3-ctc --device cuda --lane $l --audio samples/jfk.wav --iters 20 --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(sys.argv[1], sys.argv[2], "gigaam-v3-ctc encode_device %.3f ms" % r["encode_device"]["median_ms"])' $v $l
done; done; done
date -u
tab() { python3 - "$1" <<'PY'
import csv, collections, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; k = head.index("Kernel Name"); v = head.index("Metric Value")
t = collections.defaultdict(lambda: [0, 0.0]); tot = 0.0; n = 0
for r in rows[1:]:
    try:
        us = float(r[v].replace(",", "")) / 1000
    except ValueError:
        continue
    t[r[k][:70]][0] += 1; t[r[k][:70]][1] += us; tot += us; n += 1
print(f"{n} kernels, {tot:.1f} us summed")
for name, (c, us) in sorted(t.items(), key=lambda x: -x[1][1])[:22]:
    print(f"{us:9.1f} us {c:5d} x {us / c:7.2f}  {name}")
PY
}
N="ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv"
# every kernel of the bench's first launches (warm-up, capture and replays alike; per-kernel means)
for v in v77 v78; do
timeout 100 $N --launch-count 3000 /tmp/x/$v/stapes bench --synthetic gigaam-v3-ctc --device cuda --lane q8 --audio samples/jfk.wav --iters 1 > /tmp/t2/ncu-g-$v.csv 2>/tmp/t2/ncu-g.err
echo "ncu gigaam $v rc=$?"; tail -2 /tmp/t2/ncu-g.err; tab /tmp/t2/ncu-g-$v.csv
xz -c /tmp/t2/ncu-g-$v.csv > $O/ncu-gigaam-q8-$v.csv.xz
done
STAPES_CUDA_GRAPHS=0 timeout 60 $B/stapes bench --synthetic gigaam-v3-ctc --device cuda --lane q8 --audio samples/jfk.wav --iters 3 --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin); print("graphs off:", r["report"].get("encode_device"), r.get("counters", r["report"].get("counters")))' 2>&1 | tail -2
date -u
[ $(( $(date +%s)-S0 )) -lt 420 ] && timeout 100 $N --launch-count 3000 $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane q8 --audio samples/jfk.wav --iters 1 --batch 1 --decode-tokens 2 > /tmp/t2/ncu-p.csv 2>/tmp/t2/ncu-p.err
echo "ncu parakeet rc=$?"; tail -2 /tmp/t2/ncu-p.err; tab /tmp/t2/ncu-p.csv
xz -c /tmp/t2/ncu-p.csv > $O/ncu-parakeet-q8.csv.xz
date -u
for i in $(seq 1 100); do [ -f wcpp/done ] && break; [ $(( $(date +%s)-S0 )) -gt 575 ] && break; sleep 5; done
cat wcpp/done 2>/dev/null || { echo "wcpp build not done"; tail -3 wcpp/build.log; }
ls -la wcpp/wcpp/build/bin 2>/dev/null | head
date -u
