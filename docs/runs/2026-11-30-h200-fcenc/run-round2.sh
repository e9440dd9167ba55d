#!/usr/bin/env bash
# fcenc round 2 (issue 5, FastConformer encoder on CUDA; <= 60 s): fused-op tests, Parakeet/Canary
# CUDA tests, launches per block, encoder benches after vs the session's starting binary (eae1045,
# dist/round/base-stapes.xz) in the same lease, the 20-minute eager encode.
# STAPES_PARAKEET_DEVICE_LOOP=0: the host label loop (round 1: the device loop stopped every
# greedy decode with "not done within its step budget"; not this helper's code).
set -uo pipefail
O=${OUT:-out}; mkdir -p "$O"
export STAPES_FC_FIXTURES=$PWD/crates/stapes-models/tests/fixtures/fastconformer STAPES_PARAKEET_DEVICE_LOOP=0
trap 'rm -f "$O/base-stapes"' EXIT
trap 'rm -f "$O/base-stapes"; exit 143' TERM INT
xz -dc dist/round/base-stapes.xz > "$O/base-stapes" 2>/dev/null && chmod +x "$O/base-stapes"
left() { echo $(( 57 - SECONDS )); }
run() { # name timeout cmd...
  local n=$1 t=$2; shift 2
  local l; l=$(left); [ "$l" -lt 5 ] && { echo "=== $n SKIPPED (time)"; return; }
  [ "$t" -gt "$l" ] && t=$l
  echo "=== $n (limit ${t}s, at ${SECONDS}s)"
  timeout "$t" "$@" > "$O/$n.log" 2>&1; echo "rc=$?"
  grep -E "^test |test result|SKIPPED|panicked|FAILED|launches per|rel L2|ids in order|Measured|failures:|^(f16|q8|rel_)|20 min" "$O/$n.log" | cut -c1-300 | head -40
}
bench() { # name binary model lane extra...
  local n=$1 bin=$2 m=$3 l=$4; shift 4
  run "$n" 14 bash -c '"$0" "$@" 2>"'"$O/$n.err"'"' "$bin" bench --synthetic "$m" --device cuda --lane "$l" --iters 20 --json "$@"
  tail -2 "$O/$n.err" | cut -c1-200
  python3 - "$O/$n.log" <<'PY'
import json,sys
try:
    j=json.loads(open(sys.argv[1]).read()); r=j["report"]
    print({k: round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v}, j.get("counters","")[:200])
except Exception as e:
    print("no json", e)
PY
}
run conformer_ops 10 /tmp/b/conformer_ops --test-threads=1 --nocapture
run cuda_parakeet 15 /tmp/b/cuda_parakeet --test-threads=1 --nocapture
bench p-f16 /tmp/b/stapes parakeet-tdt-0.6b-v2 f16 --batch 16
bench base-p-f16 "$O/base-stapes" parakeet-tdt-0.6b-v2 f16 --batch 16
bench p-q8 /tmp/b/stapes parakeet-tdt-0.6b-v2 q8 --batch 16
run cuda_fc_kernels 8 /tmp/b/cuda_fc_kernels --test-threads=1 --nocapture
run cuda_canary 8 /tmp/b/cuda_canary --test-threads=1 --nocapture
bench c-f16 /tmp/b/stapes canary-1b-flash f16 --batch 0 --decode-tokens 4
run twenty_min 12 /tmp/b/cuda_parakeet --ignored twenty_minutes --test-threads=1 --nocapture
bench base-p-q8 "$O/base-stapes" parakeet-tdt-0.6b-v2 q8 --batch 16
export STAPES_CUDA_REL_ATTN=0
bench p-f16-composed /tmp/b/stapes parakeet-tdt-0.6b-v2 f16 --batch 16
bench base-c-f16 "$O/base-stapes" canary-1b-flash f16 --batch 0 --decode-tokens 4
rm -f "$O/base-stapes"
echo "done at ${SECONDS}s"
