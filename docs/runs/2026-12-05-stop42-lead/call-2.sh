#!/usr/bin/env bash
# Call 2 of stop 42. v88 = b5b6e87's kernels (call 1's build), v89 = v88 + the split-keys
# rel-attention's (q+u)/(q+v) operands made once a block (were made by each of its 9 warps) and
# its merge loops unrolled; glu_dw_act's taps loaded into registers before its GLU phase.
# 1. v89's tests: conformer_ops (a new K = 41 case), cuda_parakeet, cuda_canary, cuda_gigaam.
# 2. parakeet (one clip q8 and f16, 16 clips q8) and canary q8, v88 / v89 alternating, two rounds.
# 3. ncu durations (no clock control) of both kernels in one parakeet q8 clip, v88 and v89.
# Carry dist/v88.tar.xz dist/v89.tar.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/v88.tar.xz -C /tmp/x; tar -xJf dist/v89.tar.xz -C /tmp/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout ${3:-150} /tmp/x/$1/$2 --test-threads=1 --nocapture > /tmp/t2/$1-$2.log 2>&1; rc=$?
  echo "=== $1 $2 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1-$2.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED" /tmp/t2/$1-$2.log | head -8; }
for b in conformer_ops cuda_parakeet cuda_canary cuda_gigaam; do t v89 $b; done
echo "elapsed $(el) s"
e() { # build model lane batch
  /tmp/x/$1/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 20 --batch $4 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; b=sys.argv[4]
k="encode_batched" if b!="1" else "encode_device"
print(sys.argv[1], sys.argv[2], sys.argv[3], "batch", b, "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 $4 || tail -3 /tmp/t2/e.err; }
/tmp/x/v89/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane q8 --audio samples/jfk.wav --iters 3 --batch 16 > /dev/null 2>&1
for r in 1 2; do
  for v in v88 v89; do e $v parakeet-tdt-0.6b-v2 q8 1; done
  for v in v88 v89; do e $v canary-1b-flash q8 1; done
  [ $(el) -lt 260 ] || continue
  for v in v88 v89; do e $v parakeet-tdt-0.6b-v2 f16 1; done
  for v in v88 v89; do e $v parakeet-tdt-0.6b-v2 q8 16; done
done
echo "elapsed $(el) s"
n() { timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k 'regex:rel_attn_ks|glu_dw_act' -c 96 \
  /tmp/x/$1/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane q8 --audio samples/jfk.wav --iters 2 > /tmp/t2/n-$1.csv 2>/dev/null
python3 - /tmp/t2/n-$1.csv $1 <<'PY'
import csv, sys, statistics as st
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
d = {}
for r in rows[1:]:
    v = float(r[vi].replace(",", "")); v = v / 1000 if r[ui] == "ns" else v
    d.setdefault(r[ki].split("(")[0], []).append(v)
for k, v in d.items(): print(sys.argv[2], k, "n=%d median %.2f us (min %.2f)" % (len(v), st.median(v[24:] or v), min(v)))
PY
}
[ $(el) -lt 400 ] && n v88
[ $(el) -lt 430 ] && n v89
echo "done, elapsed $(el) s"
