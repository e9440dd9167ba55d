#!/usr/bin/env bash
# Not run (stop 38 had no device time left): where GigaAM's 3.4 ms goes. One gigaam-v3-ctc q8
# encode of jfk inside the bench under ncu (every kernel's duration), then the same with graphs
# off for the launch count. Build `stapes` at main as vNN (stapes only), carry dist/vNN.tar.xz.
# Expect the head-size-48 attention on `attn_rows` (flash64 takes only 64) and the v3 conv
# module's four launches (glu, depthwise conv, layer norm, SiLU) to show.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/bn
mkdir -p $B $STAPES_CACHE /tmp/t2
tar -xJf dist/vNN.tar.xz -C $B
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --launch-count 2000 \
  $B/stapes bench --synthetic gigaam-v3-ctc --device cuda --lane q8 --audio samples/jfk.wav --iters 1 > /tmp/t2/ncu.csv 2>/tmp/t2/ncu.err
echo "ncu rc=$? rows $(grep -c gpu__time_duration /tmp/t2/ncu.csv)"; tail -2 /tmp/t2/ncu.err
python3 - /tmp/t2/ncu.csv <<'PY'
import csv, collections, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; k = head.index("Kernel Name"); v = head.index("Metric Value")
t = collections.defaultdict(lambda: [0, 0.0])
for r in rows[1:]:
    try:
        t[r[k][:60]][0] += 1; t[r[k][:60]][1] += float(r[v].replace(",", "")) / 1000
    except ValueError:
        pass
for name, (n, us) in sorted(t.items(), key=lambda x: -x[1][1])[:25]:
    print(f"{us:9.1f} us {n:5d} x  {name}")
PY
xz -c /tmp/t2/ncu.csv > $O/ncu-gigaam-q8.csv.xz
