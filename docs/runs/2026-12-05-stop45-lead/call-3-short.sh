#!/usr/bin/env bash
# Stop 45, call 3 cut to what the session's last device time could hold: v106 (see call-3.sh)
# with its correctness tests, then one q8 clip with the slices and e4m3 attention off / on
# and PDL steps / linked / all, while time is left (LIMIT seconds).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
V=${V:?the bundle name}; L=${LIMIT:-100}
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/$V.tar.xz -C /tmp/x && cp -r /tmp/x/$V/audio $STAPES_CACHE/
B=/tmp/x/$V
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t() { s=$(date +%s); timeout 60 $B/$1 --test-threads=1 --nocapture $2 > /tmp/o/$1.log 2>&1; rc=$?
  echo "=== $1 $2 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/o/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|^ok split|^ok rel" /tmp/o/$1.log | head -12; }
t fp8 "split_sum rel_attention few_row"; t pdl ""; t linear_add_norms ""; t conformer_ops ""
echo "elapsed $(el) s"
e() { # split pdl model
  STAPES_CUDA_F8WG_SPLIT=$1 STAPES_CUDA_REL_ATTN_E4M3=$1 STAPES_CUDA_PDL=$2 $B/stapes bench --synthetic $3 --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_device"
print("split", sys.argv[1], "pdl", sys.argv[2], sys.argv[3], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 || tail -3 /tmp/t2/e.err; }
for m in parakeet-tdt-0.6b-v2 canary-1b-flash parakeet-tdt-0.6b-v2 canary-1b-flash; do
  [ $(el) -gt $L ] && break
  e 0 steps $m; e 1 steps $m; e 1 linked $m; e 1 all $m; done
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
