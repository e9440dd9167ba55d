#!/usr/bin/env bash
# Stop 21 call 3: this stop's code (cuBLASLt candidates of < 2 G multiply-adds timed in a CUDA
# graph; gamma/beta prefetched into L1 by layer_norm_rows16 and ln_fused), then the one-lease peer
# comparison: stapes every family f16/q8 and 16 at once, PyTorch+graph (torch_anchor.py),
# whisper.cpp 233fe1f (CUDA, sm_90, built here in the background), real tiny.en jfk whole process
# beside whisper-cli. The norms under ncu without cache flush (call 1 has the same over the
# previous norms). Stage: dist/stage2.sh v7 "ops f16_activations conformer_ops ln_pair
# cuda_whisper cuda_batch cuda_parakeet cuda_canary graphs pdl q8_accuracy linear_add"; carry
# dist/v7 dist/au dist/f1 dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c3 B=/tmp/b3
mkdir -p $B $STAPES_CACHE /tmp/t3 /tmp/m /tmp/w
tar -xJf dist/f1/wcpp.tar.xz -C /tmp/w
setsid nohup bash -c 'cd /tmp/w/wcpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/w/cfg.log 2>&1 && nice -n 19 timeout 420 cmake --build build -j 12 --target whisper-bench whisper-cli > /tmp/w/build.log 2>&1; echo "wcpp build rc=$? at $(date -u +%T)" > /tmp/w/done' > /dev/null 2>&1 < /dev/null &
tar -xJf dist/v7/bins.tar.xz -C $B && tar -xJf dist/v7/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in ops f16_activations conformer_ops ln_pair cuda_whisper cuda_batch cuda_parakeet cuda_canary graphs q8_accuracy linear_add; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t3/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t3/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A4 /tmp/t3/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t3/$t.log $O/
done
s=$(date +%s); timeout 150 $B/pdl --test-threads=1 pdl_chains_match_plain_launches_bitwise > /tmp/t3/pdl.log 2>&1; echo "=== pdl (chains) rc=$? $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t3/pdl.log | tail -1)"
date -u
timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --kernel-name regex:"layer_norm_rows16|ln_fused" --launch-count 300 $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --audio samples/jfk.wav --iters 2 --batch 0 > $O/ncu-norms-nocf.csv 2> /tmp/ncu.err; echo "ncu rc=$?"
python3 - $O/ncu-norms-nocf.csv <<'PY'
import csv, sys, statistics as st
rows=[l for l in open(sys.argv[1]) if l.startswith('"')]
r=csv.reader(rows); h=next(r); k=h.index('Kernel Name'); v=h.index('Metric Value')
d={}
for x in r: d.setdefault(x[k],[]).append(float(x[v].replace(',','')))
for n,xs in d.items(): print(n, len(xs), 'median ns', st.median(xs[-100:]))
PY
xz -9 $O/ncu-norms-nocf.csv
date -u
T=dist/f1/tools
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=$T bash tools/bench/gpu_compare.sh > /tmp/t3/cmp.txt 2>&1
date -u
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t3/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -1 /tmp/t3/jfk.txt; done
for i in $(seq 1 60); do [ -f /tmp/w/done ] && break; sleep 5; done
cat /tmp/w/done 2>/dev/null || echo "wcpp build not done"; tail -2 /tmp/w/build.log
W=/tmp/w/wcpp/build/bin
if [ -x $W/whisper-bench ]; then
  for s in turbo tiny base; do python3 $T/make_ggml_whisper.py $s /tmp/g-$s.bin > /dev/null && timeout 60 $W/whisper-bench -m /tmp/g-$s.bin -t 4 > $O/cmp/wcpp-$s.log 2>&1; grep -E "encode time|decode time" $O/cmp/wcpp-$s.log; done
fi
python3 tools/bench/gpu_table.py $O/cmp
if [ -x $W/whisper-cli ]; then
  for i in 1 2 3; do s=$(date +%s%N); timeout 30 $W/whisper-cli -m /tmp/m/tiny.bin -f samples/jfk.wav -fa > /tmp/t3/w.txt 2>&1; e=$(date +%s%N); echo "whisper-cli tiny.en whole process $(( (e-s)/1000000 )) ms"; done; grep -E "^\[|total time" /tmp/t3/w.txt
fi
cd /tmp/t3 && tar -cJf $O/logs.tar.xz *.log *.txt 2>/dev/null
date -u
