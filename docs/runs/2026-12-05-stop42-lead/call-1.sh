#!/usr/bin/env bash
# Call 1 of stop 42. v87 = 8b6094b (stop 41's head; only `stapes`), v88 = v87 + the split-keys
# rel-attention's scratch strides (merge rows padded to D + 8 floats and stored 8 bytes at a time,
# score scratch rows of 36 floats): same arithmetic, fewer shared-memory bank conflicts; and
# `linear_add_norms`' split form in 8 K slices as an option (STAPES_CUDA_SPLIT_LN=8; default 4).
# 1. v88's GPU tests: conformer_ops, cuda_parakeet, cuda_canary (the rel-attention change),
#    linear_add_norms (8 slices);
#    cuda_gigaam, cuda_qwen3a, cuda_gemma4a (8b6094b's ChainSlots, never run on a GPU).
# 2. parakeet (one clip, 16 clips) and canary, q8 and f16, v87 / v88 / v88 with 8 slices,
#    alternating, two rounds.
# 3. ncu --set full of one rel_attn_ks_d128 launch (v87, v88) and one each of the other per-block
#    kernels of a parakeet clip (v88).
# Carry dist/v87.tar.xz dist/v88.tar.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/v87.tar.xz -C /tmp/x; tar -xJf dist/v88.tar.xz -C /tmp/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout ${3:-150} /tmp/x/$1/$2 --test-threads=1 --nocapture > /tmp/t2/$1-$2.log 2>&1; rc=$?
  echo "=== $1 $2 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1-$2.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED" /tmp/t2/$1-$2.log | head -8; cp /tmp/t2/$1-$2.log $O/; }
for b in conformer_ops linear_add_norms cuda_parakeet cuda_canary cuda_gigaam cuda_qwen3a cuda_gemma4a; do t v88 $b; done
echo "elapsed $(el) s"
e() { # build model lane batch (SL: split slices)
  STAPES_CUDA_SPLIT_LN=${SL:-4} /tmp/x/$1/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 20 --batch $4 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; b=sys.argv[4]
k="encode_batched" if b!="1" else "encode_device"
print(sys.argv[1] + sys.argv[5], sys.argv[2], sys.argv[3], "batch", b, "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 $4 "/s${SL:-4}" || tail -3 /tmp/t2/e.err; }
/tmp/x/v88/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane q8 --audio samples/jfk.wav --iters 3 --batch 16 > /dev/null 2>&1
for r in 1 2; do
  for v in v87 v88; do e $v parakeet-tdt-0.6b-v2 q8 1; done; SL=8 e v88 parakeet-tdt-0.6b-v2 q8 1
  for v in v87 v88; do e $v canary-1b-flash q8 1; done; SL=8 e v88 canary-1b-flash q8 1
  [ $(el) -lt 300 ] || continue
  for v in v87 v88; do e $v parakeet-tdt-0.6b-v2 q8 16; done
  for v in v87 v88; do e $v parakeet-tdt-0.6b-v2 f16 1; done
done
echo "elapsed $(el) s"
n() { # build kernel-regex skip file
  timeout 100 ncu --set full --import-source no -k "regex:$2" -s $3 -c 1 /tmp/x/$1/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane q8 --audio samples/jfk.wav --iters 2 > $O/ncu-$4.txt 2>&1
  echo "ncu $1 $2 rc=$? $(grep -E 'Duration|Elapsed Cycles' $O/ncu-$4.txt | head -2 | tr -s ' ' | tr '\n' ';')"; }
n v87 rel_attn_ks_d128 40 rel-v87
n v88 rel_attn_ks_d128 40 rel-v88
[ $(el) -lt 420 ] && n v88 splitk_add_ln16 80 splitk-v88
[ $(el) -lt 440 ] && n v88 glu_dw_act 40 glu-v88
[ $(el) -lt 460 ] && n v88 '^act' 40 act-v88
echo "done, elapsed $(el) s"
