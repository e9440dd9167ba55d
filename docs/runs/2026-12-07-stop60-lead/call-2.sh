#!/usr/bin/env bash
# Stop 60, call 2 (inline on call 1's warm H100; /tmp/x/vM and /tmp/x/vG from call 1): ncu's time
# of every kernel of one q8 bench run (one clip) of parakeet and canary for vM and vG, to find
# where call 1's one-clip gap (1.418 against 1.527 ms) sits; then a sweep of the switches on vG.
# The four ncu runs took ~75 s each and the call hit its 300 s limit before the sweep: the CSVs
# came back (call-2-ncu-*.csv.xz), the sweep did not run.
export PATH=$PATH:/usr/local/cuda/bin STAPES_CACHE=/tmp/c2; O=$OUT
for v in vM vG; do for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do
  /tmp/x/$v/stapes bench --synthetic $m --device cuda --lane q8 --iters 3 >/dev/null 2>&1
  timeout 100 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    /tmp/x/$v/stapes bench --synthetic $m --device cuda --lane q8 --iters 1 > $O/ncu-$v-$m.csv 2>$O/ncu-$v-$m.err
  echo "$v $m rc=$?"
done; done
for x in "STAPES_CUDA_REL_TAIL=0" "STAPES_CUDA_GDW_ROWS=16" "STAPES_CUDA_HIDDEN_E4M3=0" "STAPES_CUDA_E4M3_ONLY=0" "STAPES_CUDA_NORM_E4M3_ONLY=0" "X=1"; do
  echo "$x vG $(env $x /tmp/x/vG/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane q8 --iters 20 --json 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]["encode_device"]; print(r["median_ms"])')"
done
