#!/usr/bin/env bash
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
export STAPES_CACHE=/tmp/scache B=/tmp/b/bin
ls ../shared/tools shared/tools 2>&1 | head -5
mkdir -p /tmp/m; xz -dc dist/b/tiny-en-q8_0.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
(mkdir -p /tmp/w && tar -xJf dist/b/wcpp.tar.xz -C /tmp/w && cd /tmp/w/wcpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/w/cfg.log 2>&1 && timeout 330 cmake --build build -j 12 --target whisper-bench whisper-cli > /tmp/w/build.log 2>&1; echo "wcpp build rc=$?" > /tmp/w/done) &
for t in cuda_whisper whisper_select cuda_batch; do timeout 120 $B/$t --test-threads=1 > $O/t.log 2>&1; echo "=== $t rc=$? $(grep -E '^test result' $O/t.log)"; grep -E "FAILED|panicked|SKIPPED" $O/t.log | head -5; done
for l in f16 q8; do STAPES_PARAKEET_BATCH_EXACT=0 $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane $l --audio samples/jfk.wav --iters 20 --batch 16 --json 2>&1 | tail -c 900; echo; done
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s.%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > $O/jfk.txt 2>&1; echo "jfk tiny.en $l whole process $(echo "$(date +%s.%N) - $s" | bc) s"; done; cat $O/jfk.txt; done
T=../shared/tools; [ -d $T ] || T=shared/tools
python3 $T/torch_anchor.py 2>&1 | tail -14
date -u; wait; cat /tmp/w/done; tail -3 /tmp/w/build.log
W=/tmp/w/wcpp/build/bin
for s in turbo tiny base; do python3 $T/make_ggml_whisper.py $s /tmp/g-$s.bin && $W/whisper-bench -m /tmp/g-$s.bin -t 4 2>&1 | grep -E "encode time|decode time|flash"; done
for i in 1 2 3; do s=$(date +%s.%N); $W/whisper-cli -m /tmp/m/tiny.bin -f samples/jfk.wav -fa > $O/w.txt 2>&1; echo "whisper-cli tiny.en whole process $(echo "$(date +%s.%N) - $s" | bc) s"; done; grep -E "^\[|total time" $O/w.txt
date -u
