#!/usr/bin/env bash
set -uo pipefail
export STAPES_CACHE=/tmp/scache
mkdir -p /tmp/b /tmp/scache && tar -xJf dist/d/bins.tar.xz -C /tmp/b && tar -xJf dist/d/cache.tar.xz -C /tmp/scache && mv /tmp/scache/cache/cuda /tmp/scache/cuda
B=/tmp/b/bin
for t in ln_pair fc_subsample cuda_label_loop; do timeout 90 $B/$t --test-threads=1 > /tmp/t.log 2>&1; echo "=== $t rc=$? $(grep -E '^test result' /tmp/t.log)"; grep -E "FAILED|panicked" /tmp/t.log | head -5; done
timeout 120 $B/cuda_label_loop --ignored --nocapture --test-threads=1 label_loop_speed 2>&1 | grep -vE "^$|running" | tail -25
for e in 1 0; do for l in f16 q8; do STAPES_PARAKEET_BATCH_EXACT=$e $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane $l --audio samples/jfk.wav --iters 20 --batch 16 --json 2>/dev/null | python3 -c "
import json,sys; r=json.load(sys.stdin)['report']; print('exact=$e $l', {k:round(v['median_ms'],3) for k,v in r.items() if isinstance(v,dict) and 'median_ms' in v}, {k:round(v,2) for k,v in r['extra'].items()})"; done; done
