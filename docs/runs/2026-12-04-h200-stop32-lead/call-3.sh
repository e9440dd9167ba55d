#!/usr/bin/env bash
# Stop 32 call 3: the same build v50 on a quiet machine. Call 2's gpu_compare ran while
# whisper.cpp built in the background (nice 19, 12 jobs on 16 cores), and its end-to-end figures
# (host work included) came out ~1 ms above every earlier stop's. Turbo and parakeet f16/q8,
# two rounds, nothing else running. Carry dist/v50 dist/run32.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v50/bins.tar.xz -C $B stapes && tar -xJf dist/v50/cache.tar.xz -C $STAPES_CACHE
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print("encode_device", g("encode_device"), "16:", g("encode_batched"), "decode/token", g("decode_token"), "e2e", g("end_to_end"), "e2e29", (r.get("extra") or {}).get("end_to_end_29_tokens_ms"))'; }
b() { timeout 90 $B/stapes bench --synthetic $1 --device cuda --lane $2 --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/tmp/t2/err.txt | tee $O/$1-$2-$3.json | q || tail -3 /tmp/t2/err.txt; }
uptime
for r in 1 2; do
  for m in whisper-large-v3-turbo parakeet-tdt-0.6b-v2; do
    for l in f16 q8; do echo "$m $l round $r: $(b $m $l $r)"; done
  done
done
date -u
