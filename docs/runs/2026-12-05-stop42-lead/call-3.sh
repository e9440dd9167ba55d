#!/usr/bin/env bash
# Call 3 of stop 42: v90 = v88 + only the rel-attention half of v89 (the block's (q+u)/(q+v)
# operands made once, the merge loops unrolled; glu_dw_act as in v88). Wall A/B against v88,
# alternating, two rounds. Carry dist/v88.tar.xz dist/v90.tar.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/v88.tar.xz -C /tmp/x; tar -xJf dist/v90.tar.xz -C /tmp/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
e() { # build model lane batch
  /tmp/x/$1/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 20 --batch $4 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; b=sys.argv[4]
k="encode_batched" if b!="1" else "encode_device"
print(sys.argv[1], sys.argv[2], sys.argv[3], "batch", b, "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 $4 || tail -3 /tmp/t2/e.err; }
/tmp/x/v90/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane q8 --audio samples/jfk.wav --iters 3 --batch 16 > /dev/null 2>&1
for r in 1 2; do
  [ $(el) -lt 200 ] || continue
  for v in v88 v90; do e $v parakeet-tdt-0.6b-v2 q8 1; done
  for v in v88 v90; do e $v canary-1b-flash q8 1; done
  for v in v88 v90; do e $v parakeet-tdt-0.6b-v2 f16 1; done
  for v in v88 v90; do e $v parakeet-tdt-0.6b-v2 q8 16; done
done
echo "done, elapsed $(el) s"
