#!/usr/bin/env bash
# Stop 40 CPU figures: stapes beside transformers on this 2-core box, alternating.
cd /work/main
S=./target/release/stapes
echo "# $(date -u) $(git rev-parse --short HEAD) load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in 1 2; do
  for lane in f32 q8; do
    echo "== stapes qwen3-asr-0.6b $lane (run $r)"; $S bench --synthetic qwen3-asr-0.6b --device cpu --lane $lane --audio samples/jfk.wav --iters 5 --threads 2 2>&1 | grep -v transcript
  done
  echo "== transformers qwen3-asr 0.6b (run $r)"; /tmp/tv/bin/python tools/bench/qwen3a_torch.py --iters 5 --threads 2 2>&1 | grep -v -i warn
  for lane in f32 q8; do
    echo "== stapes gemma4-audio $lane (run $r)"; $S bench --synthetic gemma4-audio --device cpu --lane $lane --audio samples/jfk.wav --iters 5 --threads 2 2>&1
  done
  echo "== transformers gemma4 audio tower (run $r)"; /tmp/tv/bin/python tools/bench/gemma4a_torch.py --iters 5 --threads 2 2>&1 | grep -v -i warn
done
echo "# end $(date -u) load $(cut -d' ' -f1-3 /proc/loadavg)"
