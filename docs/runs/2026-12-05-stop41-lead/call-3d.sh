#!/usr/bin/env bash
# Call 3d of stop 41: call-3c.sh cut to fit the device time left (one round a timing, no
# profiles). Call 3 of stop 41 (call-3.sh with v84 got no machine; this is it on v86 = 9364084): v86 = v83 + the
# Gemma 4 tower as one captured chain per (frames, valid frames) on CUDA, Qwen3-ASR's decoder
# step as one captured chain (position in a step tensor, rotary rows gathered on the device),
# both towers' GPU tests checking replay == eager bit for bit and the step chain's ids against
# eager steps. Then the Gemma tower v83 (eager) / v86 (chain) and Qwen3-ASR's steps v83 (eager)
# / v86 (chain), alternating, and where both towers' time goes (ncu).
# Carry dist/v83.tar.xz dist/v86.tar.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/v83.tar.xz -C /tmp/x; tar -xJf dist/v86.tar.xz -C /tmp/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout ${3:-150} /tmp/x/$1/$2 --test-threads=1 --nocapture > /tmp/t2/$1-$2.log 2>&1; rc=$?
  echo "=== $1 $2 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1-$2.log | tail -1)"
  grep -E "panicked|tower|embeddings|chained" /tmp/t2/$1-$2.log | head -12; cp /tmp/t2/$1-$2.log $O/; }
t v86 cuda_gemma4a
t v86 cuda_qwen3a
echo "elapsed $(el) s"
g() { /tmp/x/$1/stapes bench --synthetic gemma4-audio --device cuda --lane $2 --audio samples/jfk.wav --iters 20 --json 2>/tmp/t2/g.err | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(sys.argv[1], sys.argv[2], "gemma4 tower %.3f ms (min %.3f)" % (r["encode"]["median_ms"], r["encode"]["min_ms"]))' $1 $2 || tail -3 /tmp/t2/g.err; }
for l in q8 f16; do g v83 $l; g v86 $l; done
echo "elapsed $(el) s"
q() { /tmp/x/$1/stapes bench --synthetic qwen3-asr-0.6b --device cuda --lane $2 --audio samples/jfk.wav --iters 10 --decode-tokens 40 --json 2>/tmp/t2/q.err | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(sys.argv[1], sys.argv[2], "qwen3a tower %.3f ms, step %.3f ms (min %.3f), e2e %.1f ms" % (r["encode_device"]["median_ms"], r["decode_token"]["median_ms"], r["decode_token"]["min_ms"], r["end_to_end"]["median_ms"]))' $1 $2 || tail -3 /tmp/t2/q.err; }
for l in q8 f16; do q v83 $l; q v86 $l; done
echo "elapsed $(el) s"
echo "done, elapsed $(el) s"
