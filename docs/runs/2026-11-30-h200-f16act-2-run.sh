#!/usr/bin/env bash
# f16act, second call: every CUDA test binary (built under /work/wt-f16: its compiled-in sample
# paths are linked to this checkout), then turbo with sibling GEMMs on side streams on / off.
set -uo pipefail
F=dist/f16act; O=${OUT:-out}; mkdir -p "$O" /tmp/b /work
ln -sfn "$PWD" /work/wt-f16
tar xJf $F/bins.tar.xz -C /tmp/b
xz -dc $F/tiny-en-q8_0.bin.xz > /tmp/tiny-en-q8_0.bin
export STAPES_CACHE=$PWD/$F/cache STAPES_GPU_MODEL=/tmp/tiny-en-q8_0.bin
S="$O/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$S"; date -u | tee -a "$S"
for t in open nvrtc_compile ops graphs q8_accuracy f16_activations cuda_whisper cuda_batch cuda_parakeet cuda_canary; do
  echo "=== $t" | tee -a "$S"
  timeout 150 /tmp/b/$t --test-threads=1 --nocapture > "$O/test-$t.log" 2>&1 || echo "FAILED: $t" | tee -a "$S"
  grep -E "test result|SKIPPED|panicked|rel L2|rel_l2|ids" "$O/test-$t.log" | grep -v "^ok " | tail -8 | tee -a "$S"
done
B="$O/bench.txt"
bench() { # model lane qkv-streams
  STAPES_CUDA_QKV_STREAMS=$3 timeout 60 /tmp/b/stapes bench --synthetic $1 --device cuda --lane $2 --iters 30 --batch 16 --decode-tokens 10 --json > /tmp/j.json 2>/tmp/j.err || echo "FAILED bench $1 $2 $3" | tee -a "$S"
  echo "### $1 $2 qkv_streams=$3" >> "$B"; cat /tmp/j.json >> "$B"; echo >> "$B"
  python3 -c "import json;r=json.load(open('/tmp/j.json'))['report'];print('$1 $2 qkv_streams=$3 encode',round(r['encode']['median_ms'],3),'batched',round(r['encode_batched']['median_ms'],3))" 2>&1 | tee -a "$S"
}
for lane in f16 q8; do bench whisper-large-v3-turbo $lane 1; bench whisper-large-v3-turbo $lane 0; done
bench whisper-tiny f16 1; bench parakeet-tdt-0.6b-v2 f16 1
date -u | tee -a "$S"; (cd $O && tar czf logs.tgz test-*.log && rm -f test-*.log)
