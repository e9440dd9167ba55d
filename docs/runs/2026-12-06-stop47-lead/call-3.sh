#!/usr/bin/env bash
# Stop 47, call 3. Bundle v112 = 3adc712 + act_e4m3's SiLU on act_apply_fast and the `act` pass
# in that form for a q8 weight's f16 output (the f16 lane keeps the exact pass; call 2's form,
# fast for every f16 output, flipped a canary f16 beam id). Carry dist/v112.tar.xz.
# 1. the tests over those passes; 2. 16 clips: the rel-attention's plain form (default there)
# against the split-keys form at 9 / 5 / 3 warps (existing switches); 3. ncu's full set on one
# 16-clip launch each of rel_attn_d128, glu_dw_act, act_e4m3.
source tools/bench/device_env.sh
for b in fp8 q8_mix linear_add f16_activations ops conformer_ops cuda_parakeet cuda_canary cuda_gigaam parakeet_batch graphs; do
  t $b; [ $(el) -gt 130 ] && break; done
echo "elapsed $(el) s"
P=parakeet-tdt-0.6b-v2
e() { # label model lane batch
  $B/stapes bench --synthetic $2 --device cuda --lane $3 --iters 20 --batch $4 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_batched" if sys.argv[4]!="1" else "encode_device"
print(*sys.argv[1:5], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' "$@" || tail -3 /tmp/t2/e.err; }
for r in 1 2; do
  e plain $P q8 16
  STAPES_CUDA_REL_ATTN_KS=1 e ks9 $P q8 16
  STAPES_CUDA_REL_ATTN_KS=1 STAPES_CUDA_REL_KS_WARPS=5 e ks5 $P q8 16
  STAPES_CUDA_REL_ATTN_KS=1 STAPES_CUDA_REL_KS_WARPS=3 e ks3 $P q8 16
done
e main $P q8 1; e main canary-1b-flash q8 1; e main $P q8 1; e main canary-1b-flash q8 1
echo "elapsed $(el) s"
n() { # name regex skip count
  [ $(el) -gt 360 ] && return
  timeout 60 ncu --clock-control none --cache-control none --set full --kernel-name regex:$2 --launch-skip $3 --launch-count $4 \
    --csv --page details $B/stapes bench --synthetic $P --device cuda --lane q8 --iters 1 --batch 16 \
    > /tmp/o/ncu-$1.csv 2>/tmp/t2/ncu.err || tail -3 /tmp/t2/ncu.err
  echo "ncu $1: $(wc -l < /tmp/o/ncu-$1.csv) lines, elapsed $(el) s"; }
n rel rel_attn_d128 0 1; n act act_e4m3 0 1; n glu glu_dw_act 240 2
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
