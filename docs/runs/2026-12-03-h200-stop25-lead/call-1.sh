#!/usr/bin/env bash
# Stop 25 call 1. (a) Does Hopper have a packed f16x2 MUFU.EX2, and at what rate against f32 ex2
# (dist/mufu: a throughput microbenchmark, SASS opcodes)? (b) Build v22 = 46389e9 + the softmax
# numerators as one f16x2 ex2 per two keys (softmax_p_h2 in common.cuh; flash64 and awg64): its
# tests; SASS of awg64; then against v19 (= 46389e9's code) in one shared tuning cache,
# alternating: tiny, base, turbo (one window and 16) f16; ncu of awg64_s4 in both.
# Stage: dist/stage2.sh v22 "attention cuda_whisper cuda_batch graphs f16_activations q8_accuracy
# cuda_canary"; carry dist/v19 dist/v22 dist/au dist/mufu dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c1
A=/tmp/a1; B=/tmp/b1
mkdir -p $A $B $STAPES_CACHE /tmp/t1 /tmp/m
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
( cd dist/mufu && nvcc -O3 -arch=sm_90a -o /tmp/mufu mufu.cu && /tmp/mufu && cuobjdump -sass /tmp/mufu | grep -oE "MUFU[.A-Z0-9_]*|F2FP[.A-Z0-9_]*|HADD2[.A-Z0-9_]*" | sort | uniq -c )
tar -xJf dist/v19/bins.tar.xz -C $A && tar -xJf dist/v19/cache.tar.xz -C $STAPES_CACHE
tar -xJf dist/v22/bins.tar.xz -C $B && tar -xJf dist/v22/cache.tar.xz -C $STAPES_CACHE
tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
for f in $STAPES_CACHE/cuda/attn_wg-*.cubin $STAPES_CACHE/cuda/attention-*.cubin; do
  echo "== $(basename $f)"; cuobjdump -sass $f 2>/dev/null | awk '/Function :/{fn=$3} /MUFU/{c[fn]++} END{for(k in c) print "  ", k, "MUFU", c[k]}' | sort | head -20
done
for t in attention cuda_whisper cuda_batch graphs f16_activations q8_accuracy cuda_canary; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t1/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t1/$t.log | tail -1)"
  grep -E "panicked|SKIPPED|rel_l2|rel l2" /tmp/t1/$t.log | head -12; [ $rc -ne 0 ] && cp /tmp/t1/$t.log $O/
done
date -u
ab() { # label binary model extra...
  local label=$1 bin=$2 m=$3; shift 3
  timeout 90 $bin bench --synthetic $m --device cuda --lane f16 --audio samples/jfk.wav --iters 10 --json "$@" 2>/tmp/t1/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m $*" || tail -3 /tmp/t1/err.txt
}
for m in whisper-tiny whisper-base whisper-large-v3-turbo; do ab warm $A/stapes $m > /dev/null; ab warm $B/stapes $m > /dev/null; done
for rep in 1 2 3; do
  for m in whisper-tiny whisper-base whisper-large-v3-turbo; do ab v19 $A/stapes $m; ab v22 $B/stapes $m; done
done
ab v19 $A/stapes whisper-large-v3-turbo --batch 16; ab v22 $B/stapes whisper-large-v3-turbo --batch 16
ab v19 $A/stapes whisper-large-v3-turbo --batch 16; ab v22 $B/stapes whisper-large-v3-turbo --batch 16
date -u
for v in a1 b1; do
  timeout 100 ncu --clock-control none --cache-control none --kernel-name "regex:^awg64" --launch-count 40 --metrics gpu__time_duration.sum --csv \
    /tmp/$v/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 1 > $O/ncu-awg-$v.csv 2>/tmp/t1/ncu.err; echo "ncu $v rc=$?"
done
python3 - $O <<'PY'
import csv, sys, glob, statistics
for f in sorted(glob.glob(sys.argv[1] + "/ncu-awg-*.csv")):
    rows = [r for r in csv.reader(l for l in open(f) if l.startswith('"'))]
    h = rows[0]; i = {k: h.index(k) for k in ("Metric Name", "Metric Value", "Kernel Name")}
    v = [float(r[i["Metric Value"]].replace(",", "")) for r in rows[1:] if r[i["Metric Name"]] == "gpu__time_duration.sum" and r[i["Kernel Name"]].startswith("awg64_s4")]
    print(f.split("/")[-1], "awg64_s4 n", len(v), "median ns", statistics.median(v) if v else None, "min", min(v) if v else None)
PY
date -u
