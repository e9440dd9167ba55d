#!/usr/bin/env bash
# Stop 32 call 4: why the q8 lane's turbo decode step runs 0-0.010 ms slower than f16's when
# its decoder is f16 in both lanes (same kernels). v50; turbo f16 and q8 alternating three
# rounds (decode per token, 40 tokens); then ncu of the decode steps in each lane.
# Carry dist/v50 dist/run32.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v50/bins.tar.xz -C $B stapes && tar -xJf dist/v50/cache.tar.xz -C $STAPES_CACHE
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); x=r.get("extra") or {}; print("decode/token", g("decode_token"), "host-params", x.get("decode_token_host_params_ms"), "argmax-dl", x.get("decode_token_download_argmax_ms"))'; }
W=whisper-large-v3-turbo
for r in 1 2 3; do
  for l in f16 q8; do echo "$l round $r: $(timeout 90 $B/stapes bench --synthetic $W --device cuda --lane $l --iters 3 --batch 0 --decode-tokens 40 --json 2>/tmp/t2/err.txt | q)"; done
done
date -u
for l in f16 q8; do
  timeout 100 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --launch-skip 600 --launch-count 900 \
    $B/stapes bench --synthetic $W --device cuda --lane $l --iters 1 --batch 0 --decode-tokens 12 > $O/ncu-step-$l.csv 2>/tmp/t2/n-$l.err; echo "ncu $l rc=$?"; tail -1 /tmp/t2/n-$l.err
done
xz -9 $O/*.csv
date -u
