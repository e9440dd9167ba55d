#!/usr/bin/env bash
# Stop 15 call e2: where a parakeet / canary encode and a turbo decode step spend their time (ncu, clocks left alone).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
export STAPES_CACHE=/tmp/scache-e1 B=/tmp/b-e1
mkdir -p $B $STAPES_CACHE
[ -x $B/stapes ] || { tar -xJf dist/e1/bins.tar.xz -C $B && tar -xJf dist/e1/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/d9/audio.tar.xz -C $STAPES_CACHE; }
date -u
prof() { # tag launches args...
  local tag=$1 n=$2; shift 2
  timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count $n "$@" > $O/ncu-$tag.csv 2> $O/ncu-$tag.err
  echo "$tag rc=$? $(wc -l < $O/ncu-$tag.csv) lines"; tail -2 $O/ncu-$tag.err
}
prof parakeet-f16 1500 $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --audio samples/jfk.wav --iters 2 --batch 0
prof canary-f16 1500 $B/stapes bench --synthetic canary-1b-flash --device cuda --lane f16 --audio samples/jfk.wav --iters 2 --batch 0
prof turbo-dec-f16 1200 $B/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 1 --batch 0 --decode-tokens 4
date -u
for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do
  $B/stapes bench --synthetic $m --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 0 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$m"; done
xz -9 $O/*.csv
date -u
