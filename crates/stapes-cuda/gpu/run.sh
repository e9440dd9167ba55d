#!/usr/bin/env bash
# On the GPU machine, from the repository root: run every staged CUDA test, then the benchmark.
# Logs go to $OUT (or ./out). Usage: [STAPES_MEMCHECK=1] crates/stapes-cuda/gpu/run.sh [bench args...]
set -uo pipefail
D=dist/stapes-cuda
O=${OUT:-out}
mkdir -p "$O"
export STAPES_CACHE=${STAPES_CACHE:-/tmp/stapes-cache}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$O/gpu.txt"
fail=0
for t in open nvrtc_compile ops graphs q8_accuracy; do
  echo "=== $t"
  if ! "$D/$t" --nocapture --test-threads=1 > "$O/test-$t.log" 2>&1; then fail=1; echo "FAILED: $t"; fi
  grep -E "^test |test result|panicked|SKIPPED|FAILED|^ok |error" "$O/test-$t.log" | grep -v "^ok   " | head -40
done
if [ "${STAPES_MEMCHECK:-0}" = 1 ]; then
  echo "=== compute-sanitizer memcheck: ops"
  compute-sanitizer --tool memcheck --print-limit 10 "$D/ops" --test-threads=1 > "$O/memcheck.log" 2>&1 || fail=1
  grep -E "ERROR SUMMARY|test result" "$O/memcheck.log"
fi
echo "=== cuda_bench $*"
"$D/cuda_bench" "$@" 2>&1 | tee "$O/bench.log"
exit $fail
