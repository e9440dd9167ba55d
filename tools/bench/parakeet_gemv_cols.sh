#!/usr/bin/env bash
# The label loop's `transducer_gemv` block width on the GPU machine (issue 5): for each column
# count (STAPES_PARAKEET_GEMV_COLS), first the GPU test that every width gives the default's bits,
# then `stapes bench --synthetic parakeet-tdt-0.6b-v2` (one 11 s clip's decode, jfk end to end,
# 16 clips batched) in f16 and q8. Builds nothing: STAPES is a release binary built elsewhere,
# TRANSDUCER_OPS the `transducer_ops` test binary (cargo test --release -p stapes-cuda --test
# transducer_ops --no-run prints its path), LABEL_LOOP the `cuda_label_loop` test binary of the
# stapes crate (its ignored `label_loop_speed`: 16 clips batched vs one at a time). One line per
# (cols, lane), medians in ms.
set -uo pipefail
STAPES=${STAPES:-target/release/stapes}
ITERS=${ITERS:-20}
COLS=${COLS:-"32 8 16 64"}
if [ -n "${TRANSDUCER_OPS:-}" ]; then
  "$TRANSDUCER_OPS" --test-threads=1 transducer_linear 2>&1 | grep -E "^test |SKIPPED|panicked"
fi
for c in $COLS; do
  if [ -n "${LABEL_LOOP:-}" ]; then
    echo "cols=$c label_loop_speed:"
    STAPES_PARAKEET_GEMV_COLS=$c "$LABEL_LOOP" --ignored --nocapture --test-threads=1 \
      label_loop_speed 2>&1 | grep -vE "^$|^running|^test result"
  fi
  for lane in f16 q8; do
    STAPES_PARAKEET_GEMV_COLS=$c "$STAPES" bench --synthetic parakeet-tdt-0.6b-v2 --device cuda \
      --lane "$lane" --audio samples/jfk.wav --iters "$ITERS" --batch 16 --json 2>/dev/null |
      python3 -c '
import json, sys
r = json.load(sys.stdin)["report"]
med = {k: round(v["median_ms"], 3) for k, v in r.items() if isinstance(v, dict) and "median_ms" in v}
print(f"cols={sys.argv[1]} {sys.argv[2]}", med, {k: round(v, 3) for k, v in r["extra"].items()})
' "$c" "$lane" || echo "cols=$c $lane: bench failed"
  done
done
