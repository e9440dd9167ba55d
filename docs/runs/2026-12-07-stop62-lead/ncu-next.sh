#!/usr/bin/env bash
# Prepared for the next stop, inline after call-next.sh on its warm machine (bundles in /tmp/x):
# ncu's time of every rel-attention and act8_e4m3 launch of one 16-clip q8 bench run: vW
# (stop 61's main: the ring form, act8's old grid), vN (main: act8 in one wave) and vN with the
# staged rel-attention on; the card's own clocks.
set -uo pipefail
V=vN source tools/bench/device_env.sh
export PATH=$PATH:/usr/local/cuda/bin
P=parakeet-tdt-0.6b-v2
for run in vW: vN: vN:STAPES_CUDA_REL_STAGED=1; do
  v=${run%%:*}; envs=${run#*:}
  f=/tmp/o/ncu-$v${envs:+-staged}.csv
  env $envs timeout 120 ncu --clock-control none --kernel-name regex:"rel_attn|act8_e4m3" \
    --metrics gpu__time_duration.sum,launch__registers_per_thread --csv \
    /tmp/x/$v/stapes bench --synthetic $P --device cuda --lane q8 --iters 1 --batch 16 > $f 2>/tmp/t2/ncu.err
  echo "ncu $v $envs rc=$? elapsed $(el)"; tail -1 /tmp/t2/ncu.err
  xz -9c $f > $O/$(basename $f).xz
  python3 - "$f" <<'PY'
import csv, io, sys, statistics as st, collections
lines = [l for l in open(sys.argv[1], errors="replace") if l.startswith('"')]
t = list(csv.reader(io.StringIO("".join(lines))))
h = t[0]; ki, mi, vi = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
gi = h.index("Grid Size") if "Grid Size" in h else None
d = collections.defaultdict(list)
for r in t[1:]:
    if r[mi].startswith("gpu__time"):
        d[(r[ki], r[gi] if gi is not None else "")].append(float(r[vi].replace(",", "")) / 1000)
for (k, g), v in sorted(d.items()):
    print("  %-22s %-14s n=%3d median %.2f us" % (k, g, len(v), st.median(v)))
PY
done
echo "done, elapsed $(el) s"
