#!/usr/bin/env bash
# Prepared for the next stop, not run (stop 47 had no device time left). Bundles: vA = main's head
# + rel-ks-loader-untested.diff.txt (the split-keys rel-attention's cp.async loaders stepping
# their addresses by a constant; ~18 -> ~9 SASS instructions a 16-byte copy, per
# tools/bench/kernel_info.py; registers 158 -> 168 for ks_d128, no spills), vB = main's head.
#   git apply docs/runs/2026-12-06-stop47-lead/rel-ks-loader-untested.diff.txt
#   tools/bench/stage_device.sh vA "conformer_ops fp8 pdl cuda_parakeet cuda_canary"
#   git checkout crates/; tools/bench/stage_device.sh vB ""; cp -r ../shared/tools dist/tools
# Carry dist/vA.tar.xz, dist/vB.tar.xz, dist/tools. Run: bash <this script>
# 1. vA's tests over the rel-attention; 2. one q8 clip, vB / vA alternating; 3. on an H200 (the
# targets' card), gpu_compare.sh on main's head for the target table beside PyTorch.
V=vA source tools/bench/device_env.sh
tar -xJf dist/vB.tar.xz -C /tmp/x
t conformer_ops; t fp8 rel_attention; t pdl; t cuda_parakeet; t cuda_canary
echo "elapsed $(el) s"
e() { # bundle model
  /tmp/x/$1/stapes bench --synthetic $2 --device cuda --lane q8 --iters 20 --batch 1 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]["encode_device"]
print(*sys.argv[1:3], "%.3f ms (min %.3f)" % (r["median_ms"], r["min_ms"]))' "$@" || tail -3 /tmp/t2/e.err; }
for r in 1 2; do for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do e vB $m; e vA $m; done; done
echo "elapsed $(el) s"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  MODELS="whisper-large-v3-turbo parakeet-tdt-0.6b-v2 canary-1b-flash" STAPES=/tmp/x/vB/stapes OUT=/tmp/o/cmp \
    ITERS=10 TOOLS=dist/tools timeout 200 bash tools/bench/gpu_compare.sh
fi
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
