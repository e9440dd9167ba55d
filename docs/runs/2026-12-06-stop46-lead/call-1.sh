#!/usr/bin/env bash
# Stop 46 call 1 (main 89136ac, bundle v107) (bundle from tools/bench/stage_device.sh vNN "pdl fp8
# cuda_parakeet cuda_canary cuda_gigaam cuda_qwen3a cuda_gemma4a parakeet_batch linear_add_norms
# conformer_ops graphs"; cp -r ../shared/tools dist/tools; carry both). First the parity test of
# STAPES_CUDA_PDL=linked on a clip's block, then every family's GPU test under linked, then each
# encoder steps / linked alternating (q8 one clip, 16 clips, turbo f16 and q8). If all hold,
# linked becomes pdl::DEFAULT_MODE.
source tools/bench/device_env.sh
t pdl fastconformer_block
export STAPES_CUDA_PDL=linked
for b in cuda_parakeet cuda_canary cuda_gigaam cuda_qwen3a cuda_gemma4a parakeet_batch fp8 linear_add_norms conformer_ops graphs; do
  t $b "" -linked; [ $(el) -gt 250 ] && break; done
unset STAPES_CUDA_PDL
echo "elapsed $(el) s"
e() { # pdl model lane batch
  STAPES_CUDA_PDL=$1 $B/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 20 --batch $4 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_batched" if sys.argv[4]!="1" else "encode_device"
print("pdl", *sys.argv[1:5], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 $4 || tail -3 /tmp/t2/e.err; }
for mlb in "parakeet-tdt-0.6b-v2 q8 1" "canary-1b-flash q8 1" "gigaam-v3-ctc q8 1" "qwen3-asr-0.6b q8 1" \
  "parakeet-tdt-0.6b-v2 q8 16" "whisper-large-v3-turbo f16 1" "whisper-large-v3-turbo q8 1" "parakeet-tdt-0.6b-v2 f16 1"; do
  set -- $mlb; e steps $1 $2 $3 > /dev/null; for r in 1 2; do e steps $1 $2 $3; e linked $1 $2 $3; done
  [ $(el) -gt 480 ] && break; done
echo "elapsed $(el) s"
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
