#!/usr/bin/env bash
# Stop 14 call 3: where a turbo / tiny encode's time goes, kernel by kernel (ncu, clocks left alone).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
export STAPES_CACHE=/tmp/scache2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE
[ -x $B/stapes ] || { tar -xJf dist/d2/bins.tar.xz -C $B && tar -xJf dist/d2/cache.tar.xz -C $STAPES_CACHE; }
which ncu; date -u
prof() { # model lane tag
  timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count ${N:-1500} \
    $B/stapes bench --synthetic $1 --device cuda --lane $2 --iters 2 --batch 0 --decode-tokens 3 > $O/ncu-$3.csv 2> $O/ncu-$3.err
  echo "$3 rc=$? $(wc -l < $O/ncu-$3.csv) lines"; tail -2 $O/ncu-$3.err
}
N=1200 prof whisper-tiny f16 tiny-f16
N=2000 prof whisper-large-v3-turbo f16 turbo-f16
date -u
for m in whisper-large-v3-turbo whisper-tiny; do for l in f16; do
  $B/stapes bench --synthetic $m --device cuda --lane $l --iters 20 --batch 0 --decode-tokens 10 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$m $l"; done; done
xz -9 $O/*.csv
date -u
