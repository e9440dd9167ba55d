#!/usr/bin/env bash
# The GPU comparison run (issue 4, Deliver 5): on the GPU machine, from the repository root, with a
# stapes release binary built elsewhere (nothing is built here except, optionally, whisper.cpp).
# Runs, in one lease and in this order:
#   1. stapes bench --synthetic whisper-{large-v3-turbo,tiny,base} --device cuda, lanes f16 and q8
#      (--audio samples/jfk.wav --batch 16 --json), then parakeet-tdt-0.6b-v2 and canary-1b-flash;
#   2. PyTorch: torch_anchor.py (transformers' encoders, f16, SDPA, eager and CUDA graph);
#   3. whisper.cpp (CUDA, flash attention on): whisper-bench on random-weight ggml files of the
#      same shapes (make_ggml_whisper.py), when WCPP_BIN names its build/bin;
# then prints one table of ratios (tools/bench/gpu_table.py). Raw outputs stay in OUT.
#
# Environment: STAPES (binary, default target/release/stapes), OUT (default ./gpu-compare),
# ITERS (default 20), TOOLS (folder with torch_anchor.py and make_ggml_whisper.py, default
# ../shared/tools; the GPU machine's copy of the tree has no ../shared: carry a copy of it),
# WCPP_BIN (whisper.cpp build/bin with whisper-bench; unset = skip),
# MODELS (space-separated synthetic names; default the five above).
set -uo pipefail
STAPES=${STAPES:-target/release/stapes}
OUT=${OUT:-gpu-compare}
ITERS=${ITERS:-20}
TOOLS=${TOOLS:-../shared/tools}
MODELS=${MODELS:-"whisper-large-v3-turbo whisper-tiny whisper-base parakeet-tdt-0.6b-v2 canary-1b-flash"}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
for m in $MODELS; do
  for lane in f16 q8; do
    "$STAPES" bench --synthetic "$m" --device cuda --lane "$lane" --audio samples/jfk.wav \
      --iters "$ITERS" --batch 16 --json > "$OUT/ours-$m-$lane.json" 2> "$OUT/ours-$m-$lane.err" \
      || echo "stapes bench $m $lane failed (see $OUT/ours-$m-$lane.err)" >&2
  done
done
if [ -f "$TOOLS/torch_anchor.py" ]; then
  python3 "$TOOLS/torch_anchor.py" > "$OUT/torch.jsonl" 2> "$OUT/torch.err" || echo "torch_anchor failed" >&2
fi
if [ -n "${WCPP_BIN:-}" ] && [ -x "$WCPP_BIN/whisper-bench" ]; then
  for s in turbo tiny base; do
    python3 "$TOOLS/make_ggml_whisper.py" "$s" "/tmp/ggml-$s.bin" \
      && "$WCPP_BIN/whisper-bench" -m "/tmp/ggml-$s.bin" -t 4 > "$OUT/wcpp-$s.log" 2>&1 \
      || echo "whisper-bench $s failed" >&2
  done
fi
python3 "$(dirname "$0")/gpu_table.py" "$OUT"
