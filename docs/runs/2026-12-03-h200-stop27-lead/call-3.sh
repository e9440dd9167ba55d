#!/usr/bin/env bash
# Stop 27 call 3: build v29 = main + STAPES_CUDA_AWG_FLAGS on awg64 (bit 0: a warp whose rows all
# kept their max skips the rescale by 1; bit 1: the block's two warpgroups take turns to issue
# their MMAs, FA3's ping-pong, on the register-Q kernel). Bit-identity tests under flags 3, then
# timings of flags 0-3 alternating, turbo/tiny/base encoders; and the wgmma m64n64k16 rate.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c B=/tmp/b; mkdir -p $B $STAPES_CACHE /tmp/t
date -u
tar -xJf dist/v29/bins.tar.xz -C $B && tar -xJf dist/v29/cache.tar.xz -C $STAPES_CACHE
NV=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
[ -n "$NV" ] && $NV -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmb dist/run/wgmb.cu && timeout 60 /tmp/wgmb
for f in 3 1 2; do
  s=$(date +%s); STAPES_CUDA_AWG_FLAGS=$f timeout 120 $B/attention --test-threads=1 wg_kernels split_keys packed > /tmp/t/att$f.log 2>&1; rc=$?
  echo "=== attention flags=$f rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t/att$f.log | tail -1)"; grep -E "panicked" -A3 /tmp/t/att$f.log | head
done
timeout 60 $B/graphs --test-threads=1 2>&1 | grep "test result"
date -u
for f in 0 1 2 3 0 1 2 3; do
  STAPES_CUDA_AWG_FLAGS=$f timeout 50 $B/attention flash64_timing --test-threads=1 --nocapture 2>&1 | grep -E "awg64 where it runs, (split auto)" | sed "s/^/flags=$f /"
done
date -u
for r in 1 2 3; do
  for f in 0 3; do
    j=$(STAPES_CUDA_AWG_FLAGS=$f timeout 100 $B/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 10 --batch 16 --decode-tokens 2 --json 2>/dev/null)
    echo "turbo f16 flags=$f round $r: $(echo "$j" | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(r["encode"]["median_ms"], r.get("encode_batched",{}).get("median_ms"))' 2>&1)"
  done
done
for m in whisper-tiny whisper-base; do
  for f in 0 3 0 3; do
    j=$(STAPES_CUDA_AWG_FLAGS=$f timeout 60 $B/stapes bench --synthetic $m --device cuda --lane f16 --iters 20 --decode-tokens 2 --json 2>/dev/null)
    echo "$m f16 flags=$f: $(echo "$j" | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(r["encode"]["median_ms"])' 2>&1)"
  done
done
date -u
