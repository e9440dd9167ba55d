#!/usr/bin/env bash
# Stop 47, call 4. Bundles v113 = e62f7c1 + glu_dw_act's window of registers for K = 9 / 31 (the
# change landed after this call) and v112 (call 3's build: e62f7c1's code, the old glu_dw_act).
# Carry both. 1. v113's tests over glu_dw_act; 2. v112 / v113 alternating: parakeet q8 16 clips
# and one clip, GigaAM (K = 31) one clip.
V=v113 source tools/bench/device_env.sh
tar -xJf dist/v112.tar.xz -C /tmp/x
t conformer_ops; t fp8 conv_module; t cuda_parakeet; t parakeet_batch; t cuda_gigaam; t cuda_canary
echo "elapsed $(el) s"
e() { # bundle model batch
  /tmp/x/$1/stapes bench --synthetic $2 --device cuda --lane q8 --iters 20 --batch $3 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_batched" if sys.argv[3]!="1" else "encode_device"
print(*sys.argv[1:4], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' "$@" || tail -3 /tmp/t2/e.err; }
P=parakeet-tdt-0.6b-v2
for r in 1 2; do e v112 $P 16; e v113 $P 16; [ $(el) -gt 150 ] && break; done
e v112 $P 1; e v113 $P 1; e v112 gigaam-v3-ctc 1; e v113 gigaam-v3-ctc 1
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
