#!/usr/bin/env bash
# Call 2 of stop 41 (call 1, v82 alone, got no machine): the first GPU run of Qwen3-ASR and the
# Gemma 4 audio tower (v82 = e893f5d), stop 39's unrun GigaAM padded-batch and attention tests,
# and v83 (Qwen3-ASR's tower as one captured chain with f16 activations; many-channel conv2d as
# im2col + a tensor-core GEMM): its tests and the towers v82 / v83 / v83 with the direct conv2d,
# alternating. Carry dist/v82.tar.xz dist/v83.tar.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/v82.tar.xz -C /tmp/x; tar -xJf dist/v83.tar.xz -C /tmp/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout ${3:-150} /tmp/x/$1/$2 --test-threads=1 --nocapture > /tmp/t2/$1-$2.log 2>&1; rc=$?
  echo "=== $1 $2 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1-$2.log | tail -1)"
  grep -E "panicked|rel L2|rel_l2|step 0|planted|padded|SKIPPED|margin|FAILED|failed" /tmp/t2/$1-$2.log | head -16; cp /tmp/t2/$1-$2.log $O/; }
t v83 cuda_qwen3a
t v83 f16_activations
t v83 cuda_gemma4a
echo "elapsed $(el) s"
q() { env $3 /tmp/x/$1/stapes bench --synthetic qwen3-asr-0.6b --device cuda --lane $2 --audio samples/jfk.wav --iters 20 --decode-tokens 20 --json 2>/tmp/t2/q.err | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(sys.argv[1], sys.argv[2], sys.argv[3], "qwen3a tower %.3f ms, step %.3f ms, e2e %.1f ms" % (r["encode_device"]["median_ms"], r["decode_token"]["median_ms"], r["end_to_end"]["median_ms"]))' $1 $2 "$3" || tail -3 /tmp/t2/q.err; }
for r in 1 2; do for l in q8 f16; do q v82 $l X=1; q v83 $l X=1; q v83 $l STAPES_CUDA_CONV2D_GEMM=0; done; done
echo "elapsed $(el) s"
timeout 200 python3 tools/bench/qwen3a_torch.py --device cuda --dtype float16 --iters 10 --tokens 20 2>&1 | tail -5
echo "elapsed $(el) s"
t v82 cuda_gigaam
t v82 attention 200
echo "elapsed $(el) s"
for l in q8 f16; do echo "== gemma4-audio $l"; timeout 100 /tmp/x/v83/stapes bench --synthetic gemma4-audio --device cuda --lane $l --audio samples/jfk.wav --iters 20 2>&1 | grep -v transcript | tail -4; done
[ $(el) -lt 450 ] && timeout 100 python3 tools/bench/gemma4a_torch.py --device cuda --dtype float16 --iters 10 2>&1 | tail -3
echo "elapsed $(el) s"
[ $(el) -lt 480 ] && for l in q8 f16; do /tmp/x/v82/stapes bench --synthetic gigaam-v3-ctc --device cuda --lane $l --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(sys.argv[1], "gigaam 16 clips encode_batched %.3f ms, one clip %.3f ms" % (r["encode_batched"]["median_ms"], r["encode_device"]["median_ms"]))' $l; done
[ $(el) -lt 470 ] && t v83 pdl 100
echo "done, elapsed $(el) s"
