#!/usr/bin/env bash
# The call tried three times at the end of stop 40 (no machine started). Carry dist/v82.tar.xz:
# e893f5d's stapes and the test binaries cuda_qwen3a, cuda_gemma4a, cuda_gigaam (stop 39's
# padded-batch test among them) and stapes-cuda's attention (stop 39's 19a763d refactor).
O=$OUT; mkdir -p /tmp/x; tar -xJf dist/v82.tar.xz -C /tmp/x; B=/tmp/x/v82
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in cuda_qwen3a cuda_gemma4a cuda_gigaam attention; do
  s=$(date +%s); timeout 200 $B/$t --test-threads=1 --nocapture > $O/$t.log 2>&1
  echo "=== $t rc=$? $(( $(date +%s)-s ))s $(grep -E '^test result' $O/$t.log|tail -1)"
  grep -E "panicked|tower rel|embeddings: rel|step 0:|planted|padded" $O/$t.log | head -14
done
for m in qwen3-asr-0.6b gemma4-audio; do for l in q8 f16; do
  echo "== $m $l"; timeout 150 $B/stapes bench --synthetic $m --device cuda --lane $l --audio samples/jfk.wav --iters 10 --decode-tokens 20 2>&1 | grep -v transcript | tail -5
done; done
echo "== torch qwen3a"; timeout 160 python3 tools/bench/qwen3a_torch.py --device cuda --dtype float16 --iters 10 --tokens 20 2>&1 | tail -4
echo "== torch gemma4a"; timeout 100 python3 tools/bench/gemma4a_torch.py --device cuda --dtype float16 --iters 10 2>&1 | tail -2
