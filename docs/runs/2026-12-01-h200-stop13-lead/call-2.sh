#!/usr/bin/env bash
# Stop 13 call 2: new defaults (q8 on the f16 copy, GEMV cols 8, select split, PDL outside encoders,
# f16 cross K/V): every CUDA test incl. real tiny.en; then the peer comparison in one lease.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
exec > >(tee -a "$L") 2>&1
export STAPES_CACHE=/tmp/scache B=/tmp/b
mkdir -p /tmp/b /tmp/scache /tmp/m /tmp/t
tar -xJf dist/c2/bins.tar.xz -C /tmp/b && tar -xJf dist/c2/cache.tar.xz -C /tmp/scache && tar -xJf dist/c2/audio.tar.xz -C /tmp/scache
xz -dc dist/c1/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
(mkdir -p /tmp/w && tar -xJf dist/c2/wcpp.tar.xz -C /tmp/w && cd /tmp/w/wcpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/w/cfg.log 2>&1 && nice timeout 400 cmake --build build -j 10 --target whisper-bench whisper-cli > /tmp/w/build.log 2>&1; echo "wcpp build rc=$?" > /tmp/w/done) &
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
run1() { local t=$1; local s=$(date +%s); timeout 200 "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t/$t${TAG:-}.log" 2>&1; local rc=$?; echo "=== $t${TAG:-} rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t/$t${TAG:-}.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t/$t${TAG:-}.log" | head -4; [ $rc = 0 ] || grep -A6 "panicked" "/tmp/t/$t${TAG:-}.log" | head -14; }
export -f run1
printf '%s\n' cuda_label_loop cuda_parakeet cuda_fc_shapes cuda_canary cuda_whisper cuda_batch attention cuda_fc_kernels ops graphs select transducer_ops conformer_ops step_fused f16_activations linear_add q8_accuracy q8_mix open ln_pair fc_subsample cross_f16 i8gemm \
  | xargs -P 3 -I{} bash -c 'run1 {}'
ARGS="cuda" run1 whisper_select
for e in STAPES_CUDA_CROSS_F16=0 STAPES_CUDA_PDL=0; do env $e TAG=-$e bash -c 'run1 cuda_whisper; run1 cuda_batch'; done
date -u
T=dist/c2/tools
STAPES=$B/stapes OUT=$O/cmp ITERS=20 TOOLS=$T MODELS="whisper-large-v3-turbo whisper-tiny whisper-base parakeet-tdt-0.6b-v2 canary-1b-flash" bash tools/bench/gpu_compare.sh > /tmp/t/cmp1.txt 2>&1
date -u; cat /tmp/w/done 2>/dev/null || { echo waiting for wcpp; wait; cat /tmp/w/done; }
tail -3 /tmp/w/build.log
W=/tmp/w/wcpp/build/bin
for s in turbo tiny base; do python3 $T/make_ggml_whisper.py $s /tmp/g-$s.bin > /dev/null && $W/whisper-bench -m /tmp/g-$s.bin -t 4 > $O/cmp/wcpp-$s.log 2>&1; grep -E "encode time|decode time" $O/cmp/wcpp-$s.log; done
python3 tools/bench/gpu_table.py $O/cmp
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s.%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t/jfk.txt 2>&1; echo "jfk tiny.en stapes $l whole process $(echo "$(date +%s.%N) - $s" | bc) s"; done; cat /tmp/t/jfk.txt; done
for i in 1 2 3; do s=$(date +%s.%N); $W/whisper-cli -m /tmp/m/tiny.bin -f samples/jfk.wav -fa > /tmp/t/w.txt 2>&1; echo "whisper-cli tiny.en whole process $(echo "$(date +%s.%N) - $s" | bc) s"; done; grep -E "^\[|total time" /tmp/t/w.txt
cd /tmp/t && tar -cJf $O/logs.tar.xz *.log cmp1.txt 2>/dev/null
date -u
