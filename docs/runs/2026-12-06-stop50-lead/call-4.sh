#!/usr/bin/env bash
# Stop 50, call 4: which cuBLASLt timings rank the host. vG = 3e0adb4 + `STAPES_CUDA_LT_GRAPH_BELOW`
# (the multiply-adds under which the tuner times candidates in a graph; 2e9 by default). At 16
# parakeet clips out and pw2 (2.35 G) are timed by 5 eager launches: ~9.6 µs a run in call 3,
# cuBLASLt's host cost per call, where ncu saw them take 13.6–18.8 µs in the encode (stop 47).
# Stage: tools/bench/stage_device.sh vG ""; tools/bench/pack_bundles.sh c50d vG (carry dist/c50d)
# 1. each shape's pick and time at 2e9 / 3e9 / 1e10; 2. fresh tunings, alternating: 16 clips,
# turbo f16 one window and 16 windows; 3. ncu's time of each cuBLASLt kernel in a 16-clip
# bench run at 2e9 and 1e10, each tuned (and saved) outside ncu first.
set -uo pipefail
V=vG PACK=dist/c50d/all.tar.xz source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2; T=whisper-large-v3-turbo; C=$STAPES_CACHE/cuda
g3=STAPES_CUDA_LT_GRAPH_BELOW=3000000000; g10=STAPES_CUDA_LT_GRAPH_BELOW=10000000000
v() { local tag=$1; shift; rm -f $C/cublaslt-*.txt
  env "$@" $B/stapes --verbose bench --synthetic $P --device cuda --lane q8 --iters 3 --batch 16 --json \
    2>$O/tune-$tag.log >/dev/null; grep -c "algorithm chosen" $O/tune-$tag.log; }
v def X=1; v g3 $g3; v g10 $g10
echo "elapsed $(el) s"
export STAPES_CUDA_LT_CACHE=0
for r in 1 2 3; do e vG $P q8 16; STAPES_CUDA_LT_GRAPH_BELOW=3000000000 e vG $P q8 16; STAPES_CUDA_LT_GRAPH_BELOW=10000000000 e vG $P q8 16; done
for r in 1 2; do e vG $T f16; STAPES_CUDA_LT_GRAPH_BELOW=3000000000 e vG $T f16; STAPES_CUDA_LT_GRAPH_BELOW=10000000000 e vG $T f16; done
E_ITERS=5 e vG $T f16 16; STAPES_CUDA_LT_GRAPH_BELOW=10000000000 E_ITERS=5 e vG $T f16 16
echo "elapsed $(el) s"
unset STAPES_CUDA_LT_CACHE
for cfg in def g10; do
  rm -f $C/cublaslt-*.txt
  if [ $cfg = g10 ]; then export $g10; fi
  $B/stapes bench --synthetic $P --device cuda --lane q8 --iters 2 --batch 16 --json >/dev/null 2>&1
  timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size --csv \
    --kernel-name regex:'gemm|xmma|nvjet|cutlass|sm90' $B/stapes bench --synthetic $P --device cuda --lane q8 --iters 1 --batch 16 \
    > $O/ncu-$cfg.csv 2>/tmp/t2/ncu.err || tail -2 /tmp/t2/ncu.err
  xz -9 $O/ncu-$cfg.csv
  echo "ncu $cfg, elapsed $(el) s"
done
echo "done, elapsed $(el) s"
