#!/usr/bin/env bash
# Prepared in stop 40 (no device lent: `status` said new loans were paused), not run.
# Qwen3-ASR's and the Gemma 4 audio tower's first GPU checks and their towers beside
# transformers on the same card; run it in the
# same lease as stop 39's docs/runs/2026-12-05-h200-stop39-lead/call-next-not-run.sh (whisper.cpp
# and the GigaAM items), whose build list it extends:
#   v82 = main after stop 40: stapes, cuda_qwen3a, cuda_gemma4a (stapes crate tests).
# Carry dist/v82.tar.xz and dist/tools (tools/bench/qwen3a_torch.py and gemma4a_torch.py,
# copied there). The fixtures the tests read are in the tree
# (crates/stapes-models/tests/fixtures/qwen3a, …/gemma4a).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
mkdir -p /tmp/x /tmp/t2 && tar -xJf dist/v82.tar.xz -C /tmp/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout 200 /tmp/x/$1/$2 --test-threads=1 --nocapture > /tmp/t2/$1-$2.log 2>&1; rc=$?
  echo "=== $1 $2 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1-$2.log | tail -1)"
  grep -E "panicked|rel L2|step 0|SKIPPED" /tmp/t2/$1-$2.log | head -24; cp /tmp/t2/$1-$2.log $O/; }
t v82 cuda_qwen3a
t v82 cuda_gemma4a
# The published 0.6B shape: tower + projector from device input, one text step, end to end
# (40 tokens); q8 and f16 alternating, then transformers eager in f16 on the same card
# (perf.md: 12.82 ms for the 11 s tower; its CUDA graph capture failed).
q() { /tmp/x/v82/stapes bench --synthetic qwen3-asr-0.6b --device cuda --lane $1 --audio samples/jfk.wav --iters 20 --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(sys.argv[1], "tower %.3f ms, step %.3f ms, e2e %.1f ms" % (r["encode_device"]["median_ms"], r["decode_token"]["median_ms"], r["end_to_end"]["median_ms"]))' $1; }
for r in 1 2; do q q8; q f16; done
timeout 240 python3 dist/tools/qwen3a_torch.py --device cuda --dtype float16 --iters 10
# The Gemma 4 tower (perf.md: transformers 28.67 ms eager, 5.84 with a CUDA graph, 11 s).
for l in q8 f16; do /tmp/x/v82/stapes bench --synthetic gemma4-audio --device cuda --lane $l --audio samples/jfk.wav --iters 20 2>&1 | tail -2; done
timeout 120 python3 dist/tools/gemma4a_torch.py --device cuda --dtype float16 --iters 10
# Where the tower's time goes (the conv stem runs as the direct conv2d kernel today: ~18 GMAC
# of f32 FMAs for 11 s, expected to dominate; the fix is im2col + a tensor-core GEMM).
timeout 120 ncu --csv --page raw --metrics gpu__time_duration.sum /tmp/x/v82/stapes bench --synthetic qwen3-asr-0.6b --device cuda --lane q8 --iters 1 > $O/ncu-qwen3a-q8.csv 2>/dev/null
python3 - "$O/ncu-qwen3a-q8.csv" <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
h = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if h is None: sys.exit("no ncu rows")
k, t = rows[h].index("Kernel Name"), rows[h].index("gpu__time_duration.sum")
agg = collections.Counter()
for r in rows[h + 2:]:
    try: agg[r[k][:60]] += float(r[t])
    except (ValueError, IndexError): pass
tot = sum(agg.values())
for name, ns in agg.most_common(12): print(f"{ns/1e3:9.1f} us {100*ns/tot:5.1f} %  {name}")
PY
