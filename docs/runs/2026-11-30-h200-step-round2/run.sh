#!/usr/bin/env bash
# step (issue 4, Whisper decoder step): the fused step ops against the reference, the
# cuda_whisper step tests (graph == host-parameter steps bit for bit, real tiny.en ids), the
# fused GEMV's bandwidth on turbo shapes (its three forms), then decode_token_ms: fused vs
# STAPES_WHISPER_FUSED=0 (the previous decoder form, same binary), the step GEMV off
# (composed ops in the fused structure) and pinned staging off; then jfk wall time (tiny.en).
# Hard limit 100 s: every step under `timeout`, benches only in the time left.
set -uo pipefail
O=${OUT:-out}; mkdir -p "$O"
left() { echo $(( 96 - SECONDS )); }
echo "=== step_fused $(date -u +%T)"
timeout 25 /tmp/b/step_fused --test-threads=1 > "$O/step_fused.log" 2>&1; echo "rc $?"
grep -E "^test |panicked|test result|mismatch|over the bar|launches" "$O/step_fused.log" | head -20
echo "=== cuda_whisper step tests ($SECONDS s)"
timeout 45 /tmp/b/cuda_whisper step_graph real_weights --test-threads=1 --nocapture > "$O/cuda_whisper.log" 2>&1; rc=$?; echo "rc $rc"
grep -E "^test |panicked|test result|differ|replays" "$O/cuda_whisper.log" | head -24
if [ $rc -ne 0 ]; then
  echo "=== cuda_whisper step_graph with STAPES_CUDA_STEP_GEMV=0 ($SECONDS s)"
  STAPES_CUDA_STEP_GEMV=0 timeout 20 /tmp/b/cuda_whisper step_graph --test-threads=1 2>&1 | grep -E "^test |panicked|test result" | head -6
fi
echo "=== gemv bandwidth ($SECONDS s)"
for f in auto wide c1k1; do
  STAPES_CUDA_STEP_GEMV_FORM=$f timeout 8 /tmp/b/step_fused step_gemv_bandwidth --ignored --test-threads=1 --nocapture 2>&1 | grep -E "step_gemv|panicked" | sed "s/^/$f /"
done
bench() { # model env...
  local m=$1; shift
  local l=$(left); [ "$l" -gt 6 ] || { echo "no time left for $m $*"; return; }
  env "$@" timeout $(( l < 25 ? l : 25 )) /tmp/b/stapes bench --synthetic $m --device cuda --lane f16 --batch 1 --iters 5 --json > "$O/b.json" 2> "$O/b.err" || { echo "FAILED/timeout bench $m $* ($SECONDS s)"; tail -3 "$O/b.err"; return; }
  python3 - "$O/b.json" "$m $*" <<'PY'
import json,sys
r=json.load(open(sys.argv[1]))["report"]
d=r.get("decode_token") or {}
ex=r.get("extra") or {}
print(f"{sys.argv[2]:48s} decode_token {d.get('median_ms')} ms (min {d.get('min_ms')})  host_params {ex.get('decode_token_host_params_ms')} ms")
PY
}
echo "=== decode per token, f16 ($SECONDS s)"
bench whisper-large-v3-turbo STAPES_WHISPER_FUSED=1
bench whisper-large-v3-turbo STAPES_WHISPER_FUSED=0
bench whisper-tiny STAPES_WHISPER_FUSED=1
bench whisper-base STAPES_WHISPER_FUSED=1
bench whisper-large-v3-turbo STAPES_CUDA_STEP_GEMV=0
bench whisper-large-v3-turbo STAPES_CUDA_PINNED=0
bench whisper-tiny STAPES_WHISPER_FUSED=0
echo "=== jfk tiny.en wall ($SECONDS s)"
for e in STAPES_WHISPER_FUSED=1 STAPES_WHISPER_FUSED=0; do for bs in 1 5; do
  [ "$(left)" -gt 4 ] || break
  env $e /usr/bin/time -f "$e beam $bs: %e s wall" timeout 8 /tmp/b/stapes transcribe -m "$STAPES_GPU_MODEL" --device cuda --lane f16 --beam-size $bs samples/jfk.wav 2>&1 | tail -2
done; done
echo "=== done in $SECONDS s"
