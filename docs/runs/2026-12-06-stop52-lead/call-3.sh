#!/usr/bin/env bash
# Stop 52 call 3: fc_sub_stem_tc (vS = cdaad57 + conv0 of the stem on the f16 tensor cores)
# against vD (cdaad57's kernels, restaged as vM's successor: fc_dw_cl_h8 landed) and vS with
# STAPES_CUDA_STEM_TC=0: its tests, 16 clips / one clip / canary alternating, the stem kernels'
# ncu times. Carry dist/vD.tar.xz dist/vS.tar.xz.
set -uo pipefail
V=vS source tools/bench/device_env.sh
tar -xJf dist/vD.tar.xz -C /tmp/x
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=150
for b in fc_subsample conformer_ops cuda_parakeet cuda_canary parakeet_batch graphs pdl; do t $b; done
grep -h "stem\|sub" /tmp/o/fc_subsample.log | head -20
echo "tests done, elapsed $(el) s"
off() { STAPES_CUDA_STEM_TC=0 e "$@"; }
for r in 1 2 3; do e vD $P q8 16; e vS $P q8 16; off vS $P q8 16 | sed 's/^/TC=0 /'; done
for r in 1 2; do e vD $P q8; e vS $P q8; done
for v in vD vS; do E_ITERS=10 e $v canary-1b-flash q8; done
for v in vD vS; do
  /tmp/x/$v/stapes bench --synthetic $P --device cuda --lane q8 --iters 2 --batch 16 --json >/dev/null 2>&1
  timeout 120 ncu --clock-control none --kernel-name regex:"fc_sub_stem|fc_dw_cl" --launch-count 16 \
    --metrics gpu__time_duration.sum --csv \
    /tmp/x/$v/stapes bench --synthetic $P --device cuda --lane q8 --iters 2 --batch 16 2>/dev/null > /tmp/t2/n.csv
  python3 - $v /tmp/t2/n.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[2]) if l.startswith('"'))]
h = rows[0]; k, g, v = h.index("Kernel Name"), h.index("Grid Size"), h.index("Metric Value")
for r in rows[1:]: print(sys.argv[1], r[0], r[k], r[g], r[v], "ns")
PY
done
echo "done, elapsed $(el) s"
