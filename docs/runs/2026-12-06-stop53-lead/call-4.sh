#!/usr/bin/env bash
# Stop 53 call 4 (run inline, on call 3's warm H200): vN beside PyTorch + graph in one run
# (tools/bench/gpu_compare.sh, 10 iterations). whisper.cpp was not built (the budget), so its
# column is empty. Carry dist/tools.
O=$OUT; mkdir -p $O; export STAPES_CACHE=/tmp/c2; nvidia-smi --query-gpu=name --format=csv,noheader
ls /tmp/x/vN/stapes && STAPES=/tmp/x/vN/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/tools WCPP_BIN=/tmp/w/build/bin \
  timeout 380 bash tools/bench/gpu_compare.sh > $O/cmp.txt 2>&1
echo rc $?; tail -40 $O/cmp.txt; (cd $O && tar -cJf cmp.tar.xz cmp && rm -rf cmp)
