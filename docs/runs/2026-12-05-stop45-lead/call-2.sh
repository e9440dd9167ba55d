#!/usr/bin/env bash
# Stop 45, call 2: stop 44's call-next-2-not-run.sh as prepared, on bundle v101 (62dac48 + the diff):
# (128 weight rows a block) and 128 / 256 rows of x, for 16 clips (2240 rows), where the SiLU
# pass after cuBLASLt's fc1 costs ~15 µs x 48 an encode (stop 32). Build on the CPU box:
#   git apply docs/runs/2026-12-05-stop44-lead/f8wg-two-warpgroups-untested.diff.txt
#   tools/bench/stage_device.sh vNN "fp8"; git checkout crates/
# and carry dist/vNN.tar.xz. The forms are forced only (STAPES_CUDA_F8WG=w2n256s4 takes every
# FP8 GEMM without a residual, at any rows); the test's forced shapes include them.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
V=${V:?the bundle name}
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/$V.tar.xz -C /tmp/x && cp -r /tmp/x/$V/audio $STAPES_CACHE/
B=/tmp/x/$V
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
timeout 200 $B/fp8 --test-threads=1 --nocapture few_row > /tmp/o/fp8.log 2>&1
echo "=== fp8 few_row rc=$? $(grep -E '^test result' /tmp/o/fp8.log)"; grep -E "panicked|^ok m" /tmp/o/fp8.log | head -60
e() { # f8wg model batch
  STAPES_CUDA_F8WG=$1 $B/stapes bench --synthetic $2 --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --batch $3 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_batched" if sys.argv[3]!="1" else "encode_device"
print("f8wg", sys.argv[1], sys.argv[2], "batch", sys.argv[3], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 || tail -3 /tmp/t2/e.err; }
P=parakeet-tdt-0.6b-v2
for f in 0 w2n256s4; do e $f $P 16 > /dev/null; done
for r in 1 2 3; do e 0 $P 16; e w2n256s4 $P 16; e w2n128s6 $P 16; done
for r in 1 2; do e 1 $P 1; e w2n128s6 $P 1; done
echo "elapsed $(el) s"
STAPES_CUDA_F8WG=w2n256s4 timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  --launch-skip 2500 --launch-count 3000 $B/stapes bench --synthetic $P --device cuda --lane q8 --audio samples/jfk.wav \
  --iters 1 --batch 16 > /tmp/o/ncu-b16-w2n256.csv 2>/tmp/t2/ncu.err
python3 tools/bench/ncu_kernels.py /tmp/o/ncu-b16-w2n256.csv --marker rel_attn --top 12
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
