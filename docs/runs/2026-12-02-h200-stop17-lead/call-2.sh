#!/usr/bin/env bash
# step GEMV in the wide form for 1-2 rows (the layers' projections too): tests, then bench
# old (b9a983e) / new default / new with STAPES_CUDA_STEP_GEMV_FORM=c1 (the previous rule),
# real tiny.en jfk whole process (beam 5: the c1 path), ncu of a turbo step
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c3 B=/tmp/b3
mkdir -p $B $STAPES_CACHE /tmp/t3 /tmp/m /tmp/old /tmp/c0
tar -xJf dist/s2/bins.tar.xz -C $B && tar -xJf dist/s2/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/s0/stapes.xz > /tmp/old/stapes && chmod +x /tmp/old/stapes
tar -xJf dist/s0/cache.tar.xz -C /tmp/c0 && tar -xJf dist/au/audio.tar.xz -C /tmp/c0
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
date -u
run1() { local t=$1; local s=$(date +%s); timeout 250 "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t3/$t.log" 2>&1; local rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t3/$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t3/$t.log" | head -4; [ $rc = 0 ] || grep -A8 "panicked" "/tmp/t3/$t.log" | head -16; }
export -f run1
printf '%s\n' ops step_fused select cuda_whisper cuda_batch pdl graphs cuda_canary | xargs -P 4 -I{} bash -c 'run1 {}'
ARGS="cuda" run1 whisper_select
(cd /tmp/t3 && tar -cJf $O/logs.tar.xz *.log)
date -u
bench() { STAPES_CACHE=$3 $1 bench --synthetic $2 --device cuda --lane ${4:-f16} --audio samples/jfk.wav --iters 20 --batch 0 --decode-tokens 20 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]; e=r.get("extra",{})
print(sys.argv[1], "decode/token", round(r["decode_token"]["median_ms"],3), "encode", round(r["encode"]["median_ms"],3), "jfk29", round(e.get("end_to_end_29_tokens_ms",-1),2))' "$5 $2 ${4:-f16}"; }
export -f bench
for m in whisper-large-v3-turbo whisper-tiny whisper-base canary-1b-flash; do
  for rep in 1 2; do
  bench /tmp/old/stapes $m /tmp/c0 f16 old
  bench $B/stapes $m /tmp/c3 f16 new
  STAPES_CUDA_STEP_GEMV_FORM=c1 bench $B/stapes $m /tmp/c3 f16 new-c1
  done
done
bench $B/stapes whisper-large-v3-turbo /tmp/c3 q8 new
STAPES_CUDA_PDL_PREFETCH=0 bench $B/stapes whisper-large-v3-turbo /tmp/c3 f16 new-noprefetch
STAPES_CUDA_PDL_PREFETCH=0 bench $B/stapes whisper-large-v3-turbo /tmp/c3 f16 new-noprefetch
date -u
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -1 /tmp/jfk.txt; done
STAPES_CACHE=/tmp/c3 timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --launch-skip 300 --launch-count 45 \
  --kernel-name regex:'step|select|gemv|attn_|embed|argmax|write_rows|layer_norm' \
  $B/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 1 --batch 0 --decode-tokens 12 > $O/ncu-step-new.csv 2> /dev/null
echo "ncu rc=$?"
python3 - $O/ncu-step-new.csv <<'PY'
import csv,sys
rows=list(csv.reader(open(sys.argv[1]))); h=None
for r in rows:
    if 'Kernel Name' in r: h=r; continue
    if h and len(r)==len(h):
        v=float(r[h.index('Metric Value')].replace(',','')); u=r[h.index('Metric Unit')]
        v*= {'ns':1,'us':1e3,'usecond':1e3,'ms':1e6,'msecond':1e6}.get(u,1)
        print(f"{r[h.index('Kernel Name')][:34]:36s} {r[h.index('Grid Size')]:>14s} {v/1000:8.2f}")
PY
xz -9 $O/ncu-step-new.csv
date -u
