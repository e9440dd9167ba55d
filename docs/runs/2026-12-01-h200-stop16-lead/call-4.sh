#!/usr/bin/env bash
# logits GEMV forms: step_fused tests, the bandwidth timing per form, ncu sections, decode A/B
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE
tar -xJf dist/h2/bins.tar.xz -C $B && tar -xJf dist/h2/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
date -u
$B/step_fused --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked|n51866|n51865" | head
for e in "X=1" "STAPES_CUDA_GEMV_WAVE=0" "STAPES_CUDA_STEP_GEMV_FORM=c1"; do
  echo "== $e"; env $e $B/step_fused --ignored --nocapture step_gemv_bandwidth 2>&1 | grep "step_gemv "
done
bench() { env $1 $B/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 0 --decode-tokens 20 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]; e=r.get("extra",{})
print(sys.argv[1], "decode/token", round(r["decode_token"]["median_ms"],3), "jfk29", round(e.get("end_to_end_29_tokens_ms",-1),2))' "$1"; }
for rep in 1 2; do for e in "X=1" "STAPES_CUDA_GEMV_WAVE=0" "STAPES_CUDA_STEP_GEMV_FORM=c1"; do bench $e; done; done
for e in "X=1" "STAPES_CUDA_GEMV_WAVE=0"; do
echo "== ncu $e"
env $e timeout 120 ncu --clock-control none --kernel-name regex:'^step_gemv_1$' --launch-skip 5 --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  $B/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 1 --batch 0 --decode-tokens 8 2>/dev/null | grep -vE "^==PROF|^ *-+ *$" | tail -75
done
date -u
