#!/usr/bin/env bash
# Stop 47, call 2. Bundle v111 = 3adc712 + the f16 activation passes on act_apply_fast (`act`
# where it stores f16, and act_e4m3: the change landed after this call). Carry dist/v111.tar.xz.
# 1. the tests that run those passes; 2. one clip / 16 clips on both lanes; 3. ncu's duration of
# every kernel of a 16-clip bench run, past the one-clip encodes (grouped offline by grid).
source tools/bench/device_env.sh
for b in fp8 f16_activations ops conformer_ops cuda_parakeet cuda_canary parakeet_batch graphs; do
  t $b; [ $(el) -gt 150 ] && break; done
echo "elapsed $(el) s"
e() { # model lane batch
  $B/stapes bench --synthetic $1 --device cuda --lane $2 --iters 20 --batch $3 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_batched" if sys.argv[3]!="1" else "encode_device"
print(*sys.argv[1:4], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 || tail -3 /tmp/t2/e.err; }
P=parakeet-tdt-0.6b-v2
for mlb in "$P q8 16" "$P q8 1" "$P f16 16" "$P f16 1" "canary-1b-flash q8 1"; do
  set -- $mlb; e $1 $2 $3; e $1 $2 $3; done
echo "elapsed $(el) s"
timeout 170 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  --launch-skip 2000 --launch-count 6000 $B/stapes bench --synthetic $P --device cuda --lane q8 --iters 1 --batch 16 \
  > /tmp/o/ncu-16.csv 2>/tmp/t2/ncu.err || tail -3 /tmp/t2/ncu.err
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
