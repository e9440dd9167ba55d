#!/usr/bin/env bash
# Decoder step graph check + decode benches on the GPU machine (builds nothing there).
set -uo pipefail
D=dist/decode; F=dist/final; O=${OUT:-out}; mkdir -p "$O" /tmp/b
tar xJf $D/bins.tar.xz -C /tmp/b
xz -dc $F/tiny-en-q8_0.bin.xz > /tmp/tiny-en-q8_0.bin
export STAPES_CACHE=$PWD/$F/cache STAPES_GPU_MODEL=/tmp/tiny-en-q8_0.bin
S=$O/summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$S"
echo "=== cuda_whisper" | tee -a "$S"
timeout 230 /tmp/b/cuda_whisper --test-threads=1 --nocapture > "$O/test-cuda_whisper.log" 2>&1 || echo "FAILED: cuda_whisper" | tee -a "$S"
grep -E "^test |test result|SKIPPED|panicked|replays|differ" "$O/test-cuda_whisper.log" | tee -a "$S"
echo "=== decode per token (ms): step graph | host-parameter steps (same binary, same run)" | tee -a "$S"
for m in whisper-large-v3-turbo whisper-tiny whisper-base; do
  for lane in f16 q8; do
    timeout 60 /tmp/b/stapes bench --synthetic $m --device cuda --lane $lane --batch 1 --iters 5 --json > "$O/bench-$m-$lane.json" 2> "$O/bench-$m-$lane.err" || echo "FAILED bench $m $lane" | tee -a "$S"
    echo "$m $lane: $(grep -o '"decode_token":{[^}]*}' "$O/bench-$m-$lane.json") $(grep -o '"decode_token_host_params_ms":[0-9.]*' "$O/bench-$m-$lane.json") $(grep -o '"encode":{"median_ms":[0-9.]*' "$O/bench-$m-$lane.json")" | tee -a "$S"
  done
done
echo "=== jfk tiny.en --verbose (counters)" | tee -a "$S"
for lane in f16 q8; do
  /tmp/b/stapes --verbose transcribe -m /tmp/tiny-en-q8_0.bin --device cuda --lane $lane samples/jfk.wav > "$O/jfk-$lane.txt" 2>&1
  grep -E "counters|And so|ask" "$O/jfk-$lane.txt" | cut -c1-400 | tee -a "$S"
done
