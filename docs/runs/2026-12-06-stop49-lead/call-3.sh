#!/usr/bin/env bash
# Does ranking cuBLASLt's candidates under load pick GEMMs that run faster at the power cap?
# vC = ac1a2af + STAPES_CUDA_LT_RUNS (the runs a candidate's timing averages over; default 5
# eager for turbo's shapes, 10 in a graph for smaller ones: bursts of ~0.2 ms at full clock).
# Call 2: turbo f16 runs at 1860 MHz / 691 W (the 700 W cap), q8 16 clips at 1980 MHz.
# STAPES_CUDA_LT_CACHE=0 so each process tunes afresh. Carry dist/vC.tar.xz.
set -uo pipefail
V=vC source tools/bench/device_env.sh
export STAPES_CUDA_LT_CACHE=0
T=whisper-large-v3-turbo
E_ITERS=5 e vC $T f16
echo "warm, elapsed $(el) s"
for r in 1 2; do
  for R in 0 50 200 1000; do
    if [ $R = 0 ]; then unset STAPES_CUDA_LT_RUNS; else export STAPES_CUDA_LT_RUNS=$R; fi
    echo "-- runs $R"; E_ITERS=300 w e vC $T f16
  done
done
unset STAPES_CUDA_LT_RUNS
echo "-- heuristic pick"; STAPES_CUDA_LT_TUNE=0 E_ITERS=300 w e vC $T f16
echo "elapsed $(el) s"
for R in 0 200; do
  if [ $R = 0 ]; then unset STAPES_CUDA_LT_RUNS; else export STAPES_CUDA_LT_RUNS=$R; fi
  echo "-- runs $R"
  E_ITERS=10 w e vC $T f16 16
  E_ITERS=300 w e vC $T q8
  e vC parakeet-tdt-0.6b-v2 q8 16
done
echo "done, elapsed $(el) s"
