#!/usr/bin/env bash
# Stop 52 call 4 (call 3's script after a start found no machine; the next calls were H200-only):
# on an H200, whisper.cpp (233fe1fc9, CUDA sm_90, dist/wcpp.tar.xz) builds in the background for
# call 5 while call 3's work runs: fc_sub_stem_tc (vS) against vD and vS with
# STAPES_CUDA_STEM_TC=0, its tests, 16 clips / one clip / canary alternating, the stem kernels'
# ncu times. Carry dist/vD.tar.xz dist/vS.tar.xz dist/wcpp.tar.xz dist/tools.
set -uo pipefail
V=vS source tools/bench/device_env.sh
H200=0; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && H200=1
W=/tmp/w
if [ $H200 = 1 ] && [ ! -x $W/build/bin/whisper-bench ]; then
  mkdir -p $W && xz -dc dist/wcpp.tar.xz | tar -C $W -xf -
  (cd $W && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF \
     -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/wcmake.log 2>&1 &&
   timeout 480 cmake --build build -j 12 --target whisper-bench whisper-cli >> /tmp/wcmake.log 2>&1; echo "cmake rc $?" >> /tmp/wcmake.log) &
  WB=$!
fi
tar -xJf dist/vD.tar.xz -C /tmp/x
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=150
for b in fc_subsample conformer_ops cuda_parakeet cuda_canary parakeet_batch graphs pdl; do t $b; done
echo "tests done, elapsed $(el) s"
off() { STAPES_CUDA_STEM_TC=0 e "$@"; }
for r in 1 2 3; do e vD $P q8 16; e vS $P q8 16; off vS $P q8 16 | sed 's/^/TC=0 /'; done
for r in 1 2; do e vD $P q8; e vS $P q8; done
for v in vD vS; do E_ITERS=10 e $v canary-1b-flash q8; done
for v in vD vS; do
  /tmp/x/$v/stapes bench --synthetic $P --device cuda --lane q8 --iters 2 --batch 16 --json >/dev/null 2>&1
  timeout 100 ncu --clock-control none --kernel-name regex:"fc_sub_stem|fc_dw_cl" --launch-count 16 \
    --metrics gpu__time_duration.sum --csv \
    /tmp/x/$v/stapes bench --synthetic $P --device cuda --lane q8 --iters 2 --batch 16 2>/dev/null > /tmp/t2/n.csv
  python3 - $v /tmp/t2/n.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[2]) if l.startswith('"'))]
h = rows[0]; k, g, v = h.index("Kernel Name"), h.index("Grid Size"), h.index("Metric Value")
for r in rows[1:]: print(sys.argv[1], r[0], r[k], r[g], r[v], "ns")
PY
done
if [ $H200 = 1 ]; then
  wait $WB; tail -3 /tmp/wcmake.log; ls -la $W/build/bin/ | grep whisper
fi
echo "done, elapsed $(el) s"
