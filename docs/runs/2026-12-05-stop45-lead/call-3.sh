#!/usr/bin/env bash
# Stop 45, call 3: v106 = f8wg's K slices for linear_add_norms (fc2, pw2, and the attention's
# output projection, now fed e4m3 by rel_attention_feeding; partial sums in f32 from f8wg's
# epilogue), f8wg PDL-safe (the weight's first stages before griddepcontrol.wait), and
# STAPES_CUDA_PDL=linked (PDL inside encoder chains where the kernel ahead is a PDL-safe one of
# ours). Tests, then one q8 clip: slices and e4m3 attention off / on (split 0 / 1), PDL steps / all / linked, alternating; turbo
# f16 steps / linked; then ncu of one block with the defaults.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
V=${V:?the bundle name}
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/$V.tar.xz -C /tmp/x && cp -r /tmp/x/$V/audio $STAPES_CACHE/
B=/tmp/x/$V
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout 120 $B/$1 --test-threads=1 --nocapture > /tmp/o/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/o/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|^ok split|^ok rel" /tmp/o/$1.log | head -12; }
for b in fp8 pdl linear_add_norms cuda_parakeet cuda_canary conformer_ops graphs; do t $b; done
echo "elapsed $(el) s"
e() { # split pdl model lane
  STAPES_CUDA_F8WG_SPLIT=$1 STAPES_CUDA_REL_ATTN_E4M3=$1 STAPES_CUDA_PDL=$2 $B/stapes bench --synthetic $3 --device cuda --lane $4 --audio samples/jfk.wav --iters 20 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_device"
print("split", sys.argv[1], "pdl", sys.argv[2], sys.argv[3], sys.argv[4], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 $4 || tail -3 /tmp/t2/e.err; }
for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do
  e 0 steps $m q8 > /dev/null; for r in $(seq ${R:-2}); do e 0 steps $m q8; e 1 steps $m q8; e 1 all $m q8; e 1 linked $m q8; done; done
echo "elapsed $(el) s"
T=whisper-large-v3-turbo
e 1 steps $T f16 > /dev/null; for r in $(seq ${R:-2}); do e 1 steps $T f16; e 1 linked $T f16; done
echo "elapsed $(el) s"
P=parakeet-tdt-0.6b-v2
[ $(el) -lt ${NCU_BY:-330} ] && timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --launch-count 2500 \
  $B/stapes bench --synthetic $P --device cuda --lane q8 --audio samples/jfk.wav --iters 1 > /tmp/o/ncu-split.csv 2>/tmp/t2/ncu.err
python3 tools/bench/ncu_kernels.py /tmp/o/ncu-split.csv --marker rel_attn --top 12
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
