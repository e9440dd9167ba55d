#!/usr/bin/env bash
# Prepared in stop 39, not run: no machine was lent after call 3 (status: new loans paused).
# The one-lease run with whisper.cpp, and the GigaAM changes not yet on a GPU. Builds (stapes and
# the named test binaries, stripped, as dist/vNN.tar.xz; see README.md):
#   v79 = 89f20c9 (call 3's engine): stapes;
#   v80 = main after stop 39 (471c9a3 and later: GigaAM's attention norm writes v's FP8 input;
#         GigaAM's padded batch and its GPU test): stapes, cuda_gigaam;
#   v81 = v80 + gigaam-ln-act-untested.diff.txt (the conv module's layer norm and SiLU in one
#         pass that also writes pw2's e4m3 input): stapes, cuda_gigaam, fp8.
# whisper.cpp 233fe1f built in the background first (all cores); meanwhile the GPU tests of
# v80 and v81 and GigaAM's encode v79 / v80 / v81, alternating (device-timed, all under the
# build's load); once built: every family beside PyTorch + graph and whisper.cpp
# (tools/bench/gpu_compare.sh with WCPP_BIN: whisper-bench on ggml files of the turbo/tiny/base
# shapes). Carry dist/v79.tar.xz dist/v80.tar.xz dist/v81.tar.xz dist/wc dist/tools dist/au.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2
mkdir -p $STAPES_CACHE /tmp/t2 /tmp/x /tmp/w
S0=$(date +%s); date -u
tar -xJf dist/wc/wcpp.tar.xz -C /tmp/w
setsid nohup bash -c 'cd /tmp/w/wcpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/w/cfg.log 2>&1 && timeout 420 cmake --build build -j 15 --target whisper-bench whisper-cli > /tmp/w/build.log 2>&1; echo "wcpp build rc=$? at $(date -u +%T)" > /tmp/w/done' > /dev/null 2>&1 < /dev/null &
tar -xJf dist/v79.tar.xz -C /tmp/x && tar -xJf dist/v80.tar.xz -C /tmp/x && tar -xJf dist/v81.tar.xz -C /tmp/x && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout 150 /tmp/x/$1/$2 --test-threads=1 --nocapture > /tmp/t2/$1-$2.log 2>&1; rc=$?
  echo "=== $1 $2 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1-$2.log | tail -1)"
  grep -E "panicked|planted|jfk|Snapshot|SKIPPED" /tmp/t2/$1-$2.log | head -12; cp /tmp/t2/$1-$2.log $O/; }
t v80 cuda_gigaam
t v81 cuda_gigaam
t v81 fp8
g() { /tmp/x/$1/stapes bench --synthetic gigaam-v3-ctc --device cuda --lane $2 --audio samples/jfk.wav --iters 20 --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(sys.argv[1], sys.argv[2], "gigaam-v3-ctc encode_device %.3f ms" % r["encode_device"]["median_ms"])' $1 $2; }
for r in 1 2 3; do for l in q8 f16; do g v79 $l; g v80 $l; g v81 $l; done; done
# GigaAM's padded batch (eager on CUDA): 16 copies of jfk, beside the package's 16-clip graph
for l in q8 f16; do /tmp/x/v80/stapes bench --synthetic gigaam-v3-ctc --device cuda --lane $l --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(sys.argv[1], "gigaam 16 clips encode_batched %.3f ms" % r["encode_batched"]["median_ms"])' $l; done
date -u
for i in $(seq 1 90); do [ -f /tmp/w/done ] && break; sleep 5; done
cat /tmp/w/done 2>/dev/null || { echo "wcpp build not done"; tail -3 /tmp/w/build.log; }
date -u
W=/tmp/w/wcpp/build/bin
M="whisper-large-v3-turbo whisper-tiny whisper-base parakeet-tdt-0.6b-v2 canary-1b-flash"
[ $(( $(date +%s)-S0 )) -gt 420 ] && M="whisper-large-v3-turbo whisper-tiny whisper-base"
MODELS="$M" STAPES=/tmp/x/v80/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/tools WCPP_BIN=$W timeout 200 bash tools/bench/gpu_compare.sh > /tmp/t2/cmp.txt 2>&1
tail -40 /tmp/t2/cmp.txt
grep -hE "encode time|decode time|batchd time|total time" $O/cmp/wcpp-*.log 2>/dev/null | head -20
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd - > /dev/null && rm -rf $O/cmp
date -u
