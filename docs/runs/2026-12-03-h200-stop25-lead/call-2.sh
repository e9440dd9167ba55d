#!/usr/bin/env bash
# Stop 25 call 2: main's code (stop 24's 8eab000 kernels) + the STAPES_CUDA_LT_PICK experiment
# switch, inert unless set (not landed: lt-pick-switch.diff.txt); build v23, in one lease beside
# PyTorch+graph and whisper.cpp: 21 of the 24 CUDA test binaries (real tiny.en via STAPES_GPU_MODEL; cuda_fc_kernels, cuda_label_loop and whisper_select left out for the carry limit),
# then tools/bench/gpu_compare.sh (stapes every family f16/q8 and 16 at once; torch_anchor.py),
# whisper.cpp (fetched tree as in stop 21, CUDA sm_90, built here in the background while the
# tests and our benches run) whisper-bench on ggml files of the same shapes, and real tiny.en jfk
# whole process, stapes beside whisper-cli. While whisper.cpp builds: does the tuner's per-shape
# choice (the fastest candidate timed alone) leave time on the table inside the whole encoder?
# Turbo f16, one shared cache: each of q|k|v, out, fc1, fc2 forced (STAPES_CUDA_LT_PICK) to each
# of its first 6 heuristic candidates (one-window and 16-window shapes alike), then the best
# combination against the tuner's, alternating. Stage: dist/stage2.sh v23 "<the 24 binaries>"; carry
# dist/v23 dist/au dist/f1 dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m /tmp/w
date -u
tar -xJf dist/f1/wcpp.tar.xz -C /tmp/w
setsid nohup bash -c 'cd /tmp/w/wcpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/w/cfg.log 2>&1 && nice -n 19 timeout 420 cmake --build build -j 12 --target whisper-bench whisper-cli > /tmp/w/build.log 2>&1; echo "wcpp build rc=$? at $(date -u +%T)" > /tmp/w/done' > /dev/null 2>&1 < /dev/null &
tar -xJf dist/v23/bins.tar.xz -C $B && tar -xJf dist/v23/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for t in attention conformer_ops cross_f16 f16_activations fc_subsample graphs i8gemm linear_add ln_pair open ops pdl q8_accuracy q8_mix select step_fused transducer_ops cuda_batch cuda_canary cuda_fc_shapes cuda_parakeet cuda_whisper; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$t.log | head -8; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
T=dist/f1/tools
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=$T bash tools/bench/gpu_compare.sh > /tmp/t2/cmp.txt 2>&1
date -u
python3 - $B/stapes <<'PY'
import json, os, subprocess, sys, time, statistics as st
stapes = sys.argv[1]
T0 = time.time()  # at most ~3 minutes here: whisper.cpp's benches come after
shapes = {"qkv": (3840, 1280), "out": (1280, 1280), "fc1": (5120, 1280), "fc2": (1280, 5120)}
def run(picks, batch=16):
    if time.time() - T0 > 180:
        return None, None
    pk = ",".join(f"{m}x{n}x{k}={i}" for s, i in picks.items() for (m, k) in [shapes[s]] for n in (1500, 24000))
    env = dict(os.environ, STAPES_CUDA_LT_PICK=pk)
    p = subprocess.run([stapes, "bench", "--synthetic", "whisper-large-v3-turbo", "--device", "cuda", "--lane", "f16",
                        "--iters", "10", "--batch", str(batch), "--decode-tokens", "2", "--json"],
                       env=env, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return None, None
    r = json.loads(p.stdout)["report"]
    return r.get("encode", {}).get("median_ms"), r.get("encode_batched", {}).get("median_ms")
run({})
base = [run({}) for _ in range(2)]
print("tuner", base, flush=True)
res = {}
for s in shapes:
    for i in range(6):
        res[(s, i)] = run({s: i})
        print(s, i, res[(s, i)], flush=True)
best1 = {s: min(range(6), key=lambda i: res[(s, i)][0] or 1e9) for s in shapes}
best16 = {s: min(range(6), key=lambda i: res[(s, i)][1] or 1e9) for s in shapes}
print("best one-window picks", best1, "best 16-window picks", best16, flush=True)
a, b, c = [], [], []
for _ in range(3):
    a.append(run({})); b.append(run(best1)); c.append(run(best16))
print("tuner   ", a)
print("best1   ", b)
print("best16  ", c)
for name, xs in (("tuner", a), ("best1", b), ("best16", c)):
    xs = [x for x in xs if x[0] is not None and x[1] is not None]
    if xs:
        print(name, "encode median", st.median(x[0] for x in xs), "16 windows median", st.median(x[1] for x in xs))
PY
date -u
for i in $(seq 1 60); do [ -f /tmp/w/done ] && break; sleep 5; done
cat /tmp/w/done 2>/dev/null || { echo "wcpp build not done"; tail -3 /tmp/w/build.log; }
W=/tmp/w/wcpp/build/bin
if [ -x $W/whisper-bench ]; then
  for s in turbo tiny base; do python3 $T/make_ggml_whisper.py $s /tmp/g-$s.bin > /dev/null && timeout 60 $W/whisper-bench -m /tmp/g-$s.bin -t 4 > $O/cmp/wcpp-$s.log 2>&1; grep -E "encode time|decode time" $O/cmp/wcpp-$s.log; done
fi
python3 tools/bench/gpu_table.py $O/cmp
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t2/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -1 /tmp/t2/jfk.txt; done
if [ -x $W/whisper-cli ]; then
  for i in 1 2 3; do s=$(date +%s%N); timeout 30 $W/whisper-cli -m /tmp/m/tiny.bin -f samples/jfk.wav -fa > /tmp/t2/w.txt 2>&1; e=$(date +%s%N); echo "whisper-cli tiny.en whole process $(( (e-s)/1000000 )) ms"; done; grep -E "^\[|total time" /tmp/t2/w.txt
fi
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd - > /dev/null && rm -rf $O/cmp
date -u
