#!/usr/bin/env bash
# Stop 38 call 1. v73 = main c20424a; v74 = eca6197 (CPU-side refactors on c20424a) + stop 36's three prepared patches
# (pdl-launch-order-edges, mlp-add-norms, rel-attention-e4m3) + stop 37's gigaam-chain patch +
# a rotary_half kernel (conformer_ops: rotary_half_matches_the_reference_in_one_launch).
# Carry dist/v7374.tar.xz dist/au dist/giga (GigaAM 8555893's gigaam/, for
# tools/bench/gigaam_torch_gpu.py). With dist/tiny.bin.xz the tree is past the 64 MiB carry: the
# real tiny.en tests go to the next call. First main's GPU tests (stop 36's review
# commits and GigaAM have never run on a GPU), then the patches' tests, then encoders main vs
# patches (edges off / on), alternating.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2
mkdir -p $STAPES_CACHE /tmp/t2 /tmp/m /tmp/x
S0=$(date +%s); date -u
tar -xJf dist/v7374.tar.xz -C /tmp/x && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
[ -f dist/tiny.bin.xz ] && xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
A=/tmp/x/v73; B=/tmp/x/v74
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
python3 -c "import torch, sys; print(\"torch\", torch.__version__)"; for m in torchaudio omegaconf hydra sentencepiece soundfile; do python3 -c "import $m; print(\"$m ok\")" 2>&1 | tail -1; done
t() { d=$1; n=$2; s=$(date +%s); timeout 200 /tmp/x/$d/$n --test-threads=1 --nocapture > /tmp/t2/$d-$n.log 2>&1; rc=$?
  echo "=== $d $n (edges ${STAPES_CUDA_PDL_EDGES:-0}) rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$d-$n.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|^edges|time:|graph ==|rel L2|rel_l2 .* bar" -A1 /tmp/t2/$d-$n.log | head -14
  [ $rc -ne 0 ] && cp /tmp/t2/$d-$n.log $O/; }
for x in cuda_gigaam fp8 attention graphs conformer_ops pdl cuda_whisper cuda_batch cuda_parakeet cuda_canary parakeet_batch; do t v73 $x; done
date -u
for x in cuda_gigaam conformer_ops pdl graphs fp8 cuda_parakeet cuda_canary parakeet_batch cuda_whisper; do t v74 $x; done
export STAPES_CUDA_PDL_EDGES=1
for x in cuda_parakeet cuda_canary parakeet_batch cuda_whisper cuda_gigaam; do t v74 $x; done
unset STAPES_CUDA_PDL_EDGES
date -u
cp /tmp/t2/v7*-cuda_gigaam.log $O/ 2>/dev/null
timeout 120 python3 tools/bench/gigaam_torch_gpu.py --gigaam-src dist/giga 2>&1 | tail -6
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: r[k]["median_ms"] if isinstance(r.get(k),dict) else r.get(k); print("enc_dev %.4f batch16 %s" % (g("encode_device"), g("encode_batched")))' 2>&1 | tail -1; }
b() { STAPES_CUDA_PDL_EDGES=$4 timeout 90 /tmp/x/$1/stapes bench --synthetic $2 --device cuda --lane $3 $5 --json 2>/tmp/t2/err.txt | q; }
P="--audio samples/jfk.wav --iters 20 --batch 16"; C="--audio samples/jfk.wav --iters 20 --batch 1"; W="--iters 20 --batch 1 --decode-tokens 2"
for mo in "parakeet-tdt-0.6b-v2|$P|q8" "gigaam-v3-ctc|$C|q8" "canary-1b-flash|$C|q8" "whisper-large-v3-turbo|$W|q8" "gigaam-v3-ctc|$C|f16" "whisper-large-v3-turbo|$W|f16"; do
  IFS='|' read -r m o l <<< "$mo"
  [ $(( $(date +%s)-S0 )) -gt 540 ] && { echo "time up before $m $l"; break; }
  b v74 $m $l 0 "$o" > /dev/null
  for r in 1 2; do echo "$m $l r$r: main $(b v73 $m $l 0 "$o") | patches $(b v74 $m $l 0 "$o") | patches+edges $(b v74 $m $l 1 "$o")"; done
done
date -u
