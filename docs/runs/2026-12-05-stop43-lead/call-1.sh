#!/usr/bin/env bash
# Stop 43 call 1 (v91 = main d3a3c59): main's GPU tests that never ran on a GPU (d3a3c59's
# rel_attn_smem, conformer_ops' K = 41 depthwise case against main's glu kernel), the encoders'
# current figures, every kernel of one encode under ncu (parakeet q8 one clip and 16 clips,
# canary q8, turbo f16 one window; tuning cache warmed first), then SASS-level reports of
# glu_dw_act and rel_attn_ks_d128 (stop 42's call-next-not-run.sh). Carry dist/v91.tar.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/v91.tar.xz -C /tmp/x
B=/tmp/x/v91
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout ${2:-150} $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED" /tmp/t2/$1.log | head -8; cp /tmp/t2/$1.log $O/; }
for b in conformer_ops cuda_parakeet cuda_canary parakeet_batch; do t $b; done
echo "elapsed $(el) s"
e() { # model lane batch
  $B/stapes bench --synthetic $1 --device cuda --lane $2 --audio samples/jfk.wav --iters 20 --batch $3 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; b=sys.argv[3]
k="encode_batched" if b!="1" else "encode_device"
print(sys.argv[1], sys.argv[2], "batch", b, "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 || tail -3 /tmp/t2/e.err; }
for r in 1 2; do
  e parakeet-tdt-0.6b-v2 q8 1; e parakeet-tdt-0.6b-v2 q8 16; e canary-1b-flash q8 1; e whisper-large-v3-turbo f16 1
done
echo "elapsed $(el) s"
N="ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv"
w() { # tag model lane batch launch-count
  timeout 120 $N --launch-count $5 $B/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 1 --batch $4 > /tmp/t2/ncu-$1.csv 2>/tmp/t2/ncu.err
  echo "ncu $1 rc=$? $(grep -c '^"' /tmp/t2/ncu-$1.csv) rows, elapsed $(el)"; xz -c /tmp/t2/ncu-$1.csv > $O/ncu-$1.csv.xz; }
w parakeet-q8-b1 parakeet-tdt-0.6b-v2 q8 1 2500
w parakeet-q8-b16 parakeet-tdt-0.6b-v2 q8 16 2500
[ $(el) -lt 330 ] && w turbo-f16-b1 whisper-large-v3-turbo f16 1 1500
[ $(el) -lt 360 ] && w canary-q8-b1 canary-1b-flash q8 1 2500
p() { # tag model lane kernel-regex skip
  timeout 100 ncu --set full --import-source yes -k "regex:$4" -s $5 -c 1 -o /tmp/$1 -f \
    $B/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 2 > /dev/null 2>&1
  echo "ncu $1 rc=$? elapsed $(el)"
  ncu -i /tmp/$1.ncu-rep --print-details all > $O/$1.txt 2>&1
  ncu -i /tmp/$1.ncu-rep --page source --print-source sass --csv > $O/$1-sass.csv 2>&1 || echo "no source page"
  xz -f $O/$1-sass.csv; }
[ $(el) -lt 420 ] && p glu-parakeet-q8 parakeet-tdt-0.6b-v2 q8 glu_dw_act 40
[ $(el) -lt 470 ] && p rel-parakeet-q8 parakeet-tdt-0.6b-v2 q8 rel_attn_ks_d128 40
[ $(el) -lt 520 ] && p awg64-turbo-f16 whisper-large-v3-turbo f16 '^awg64' 40
echo "done, elapsed $(el) s"
