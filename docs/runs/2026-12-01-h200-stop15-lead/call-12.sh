#!/usr/bin/env bash
# Stop 15 call 12: where a turbo decoder step's time goes (ncu over the step kernels only).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
mkdir -p /tmp/g1 && xz -dc dist/g1/stapes.xz > /tmp/g1/stapes && chmod +x /tmp/g1/stapes
mkdir -p /tmp/c && tar -xJf dist/f1/cache.tar.xz -C /tmp/c && tar -xJf dist/d9/audio.tar.xz -C /tmp/c
export STAPES_CACHE=/tmp/c
/tmp/g1/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 2 --batch 0 --decode-tokens 8 --json > /dev/null 2>&1
timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 400 \
  --kernel-name regex:'step|select|gemv|attn_split|attn_combine|embed|argmax|copy|write_rows' \
  /tmp/g1/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 1 --batch 0 --decode-tokens 8 > $O/ncu-turbo-step.csv 2> $O/ncu-turbo-step.err
echo "rc=$? $(wc -l < $O/ncu-turbo-step.csv)"; tail -3 $O/ncu-turbo-step.err
xz -9 $O/ncu-turbo-step.csv
