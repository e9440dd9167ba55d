#!/usr/bin/env bash
# Stop 47, call 5 (v112 = e62f7c1's code). Where glu_dw_act and rel_attn_d128 spend a 16-clip
# launch, line by line: ncu's source page (SASS, executed instructions and stall samples a line).
source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2
s() { # name regex skip
  timeout 50 ncu --clock-control none --cache-control none --set full --import-source no --kernel-name regex:$2 \
    --launch-skip $3 --launch-count 1 --page source --print-source sass --csv \
    $B/stapes bench --synthetic $P --device cuda --lane q8 --iters 1 --batch 16 > /tmp/o/src-$1.csv 2>/tmp/t2/ncu.err || tail -3 /tmp/t2/ncu.err
  echo "src $1: $(wc -l < /tmp/o/src-$1.csv) lines, elapsed $(el) s"; }
s glu glu_dw_act 240; s rel rel_attn_d128 0
xz -T4 /tmp/o/src-*.csv; tar -C /tmp/o -cf $O/out.tar .
echo "done, elapsed $(el) s"
