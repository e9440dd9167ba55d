#!/usr/bin/env bash
# Prepared for the next stop (not run: this stop's device time was spent). Where the remaining
# single-launch time goes, per instruction: ncu --set full with SASS-level source counters of
#   - awg64 (turbo f16, one window: the attention, ~35 µs a layer, issue 4's ≤ 4.5 ms),
#   - rel_attn_ks_d128 (one parakeet clip, 11.7 µs a launch after this stop),
#   - glu_dw_act (one clip, 700 instructions a warp at 12 cycles an issue),
# each report also printed as text. Needs a build `dist/vNN.tar.xz` of main (B below).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
B=${B:-v91}
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x
tar -xJf dist/$B.tar.xz -C /tmp/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
p() { # name model lane kernel-regex skip
  timeout 150 ncu --set full --import-source yes -k "regex:$4" -s $5 -c 1 -o /tmp/$1 -f \
    /tmp/x/$B/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 2 > /dev/null 2>&1
  echo "ncu $1 rc=$?"
  ncu -i /tmp/$1.ncu-rep --print-details all > $O/$1.txt 2>&1
  ncu -i /tmp/$1.ncu-rep --page source --print-source sass --csv > $O/$1-sass.csv 2>&1 || echo "no source page"
  xz -f $O/$1-sass.csv; cp /tmp/$1.ncu-rep $O/ 2>/dev/null
}
p awg64-turbo-f16 whisper-large-v3-turbo f16 '^awg64' 40
p rel-parakeet-q8 parakeet-tdt-0.6b-v2 q8 rel_attn_ks_d128 40
p glu-parakeet-q8 parakeet-tdt-0.6b-v2 q8 glu_dw_act 40
