#!/usr/bin/env bash
# Stop 61, call 2 (prepared; on call 1's warm machine or any other): the warpgroup attention's
# PIPE forms (43e6de2, off by default: STAPES_CUDA_ATTN_PIPE=1 turns them on). Carry dist/c23
# (pack_bundles.sh c23 vP vM b8f2d3dd bdb696bc b0ea7c8b bd44646a b88f5787 be024acf; vP = main
# with the PIPE forms) and dist/tools.
# 1. `attention`: both forms bit for bit against flash64 (and the rest of that binary).
# 2. Alternating, pipe off / on: turbo one window q8 and f16 (the attention is ~35 % of q8's
#    layer, stop 56's profile: q8 is not power-capped, so a faster attention shows there first),
#    16 turbo windows f16, tiny (the split form); then 400 f16 windows each way under `w` (the
#    clock and power at the cap).
# 3. ncu of one turbo q8 bench run each way: the attention launches' own times.
set -uo pipefail
PACK=dist/c23/all.tar.xz V=vP source tools/bench/device_env.sh
cat $B/COMMIT
t attention
echo "tests done, elapsed $(el) s"
T=whisper-large-v3-turbo
pe() { STAPES_CUDA_ATTN_PIPE=$1 e "${@:2}" | sed "s/^/pipe$1 /"; }
for r in 1 2; do for p in 0 1; do pe $p vP $T q8; pe $p vP $T f16; done; done
for p in 0 1; do pe $p vP $T f16 16; pe $p vP whisper-tiny q8; done
# f16 one window runs at the 700 W cap: the clock and power of 400 windows each way (`w`)
for p in 0 1; do
  STAPES_CUDA_ATTN_PIPE=$p w $B/stapes bench --synthetic $T --device cuda --lane f16 --iters 400 > /tmp/t2/w$p.txt 2>&1
  echo "pipe $p: $(grep -iE 'encode' /tmp/t2/w$p.txt | head -1)"
done
echo "A/B done, elapsed $(el) s"
export PATH=$PATH:/usr/local/cuda/bin
for p in 0 1; do
  STAPES_CUDA_ATTN_PIPE=$p timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
    --csv -k regex:awg64 $B/stapes bench --synthetic $T --device cuda --lane q8 --iters 1 > /tmp/o/ncu-pipe$p.csv 2>/tmp/t2/ncu.err
  echo "ncu pipe $p rc=$? elapsed $(el)"; tail -1 /tmp/t2/ncu.err
  python3 - /tmp/o/ncu-pipe$p.csv <<'PY'
import csv, sys, statistics as st
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))]
by = {}
for r in rows:
    if r.get("Metric Name") == "gpu__time_duration.sum":
        by.setdefault(r["Kernel Name"], []).append(float(r["Metric Value"].replace(",", "")))
for k, v in sorted(by.items()):
    print("  %-14s %4d launches, median %.2f us" % (k, len(v), st.median(v) / 1000 if max(v) > 1e4 else st.median(v)))
PY
  xz -9c /tmp/o/ncu-pipe$p.csv > $O/ncu-pipe$p.csv.xz
done
echo "done, elapsed $(el) s"
