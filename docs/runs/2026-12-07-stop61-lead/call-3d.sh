#!/usr/bin/env bash
# Stop 61, calls 3c and 3d (inline, on the same warm H100): ncu's time of every glu_dw_act launch
# in one parakeet q8 bench run (the encode's one-clip launches and the tuner's 16-clip ones),
# with its registers and shared memory, for vM and vP (3c ran vP alone, the same figures).
export PATH=$PATH:/usr/local/cuda/bin STAPES_CACHE=/tmp/c2
for v in vM vP; do
  timeout 40 ncu --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,launch__shared_mem_per_block_static \
    --csv -k regex:glu_dw_act /tmp/x/$v/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane q8 --iters 1 > $OUT/ncu-gdw-$v.csv 2>/dev/null
  echo "$v rc=$?"
done
