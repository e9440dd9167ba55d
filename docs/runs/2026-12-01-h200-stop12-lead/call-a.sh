#!/usr/bin/env bash
# Device call A: unpack, every CUDA test binary not needing real weights (4 at a time), then benches + torch.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
export STAPES_CACHE=/tmp/scache
mkdir -p /tmp/b /tmp/scache
tar -xJf dist/a/bins.tar.xz -C /tmp/b
tar -xJf dist/a/cache.tar.xz -C /tmp/scache --strip-components=0
mv /tmp/scache/cache/cuda /tmp/scache/cuda 2>/dev/null; rm -rf /tmp/scache/cache
ls /tmp/scache /tmp/scache/cuda | head -20
B=/tmp/b/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$O/gpu.txt"
date -u
run1() { local t=$1; local s=$(date +%s); timeout 170 "$B/$t" --test-threads=1 > "$O/test-$t.log" 2>&1; local rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "$O/test-$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "$O/test-$t.log" | head -6; }
export -f run1; export B O
# the slow first-use things first, so 4 at a time overlap them
printf '%s\n' cuda_label_loop cuda_parakeet cuda_fc_shapes cuda_canary attention cuda_fc_kernels ops graphs select transducer_ops conformer_ops step_fused f16_activations linear_add q8_accuracy open ln_pair fc_subsample cross_f16 pdl i8gemm \
  | xargs -P 4 -I{} bash -c 'run1 {}'
date -u
STAPES=$B/stapes OUT=$O/cmp ITERS=20 TOOLS=$( [ -d ../shared/tools ] && echo ../shared/tools || echo shared/tools ) bash tools/bench/gpu_compare.sh 2>&1 | tail -40
for l in f16 q8; do STAPES_PARAKEET_BATCH_EXACT=0 $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane $l --audio samples/jfk.wav --iters 20 --batch 16 --json > $O/cmp/parakeet-former-$l.json 2>&1; done
python3 - "$O/cmp" <<'PY'
import json,sys,glob,os
for p in sorted(glob.glob(sys.argv[1]+"/*.json")):
    try: r=json.load(open(p))["report"]
    except Exception as e: print(os.path.basename(p), "ERR", e); continue
    d={k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict)}
    d.update({k:round(v,3) for k,v in r.get("extra",{}).items()})
    print(os.path.basename(p), d)
PY
date -u
