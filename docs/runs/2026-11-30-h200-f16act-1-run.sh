#!/usr/bin/env bash
# f16act: every CUDA test binary at the f16act branch, then benches with f16 activations on
# (STAPES_CUDA_F16_ACT=1, the default), off (=0, f32 activations as before) and main's previous
# binary (stapes_before), all in this one call.
set -uo pipefail
F=dist/f16act; O=${OUT:-out}; mkdir -p "$O" /tmp/b
tar xJf $F/bins.tar.xz -C /tmp/b
xz -dc $F/tiny-en-q8_0.bin.xz > /tmp/tiny-en-q8_0.bin
export STAPES_CACHE=$PWD/$F/cache STAPES_GPU_MODEL=/tmp/tiny-en-q8_0.bin
S="$O/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$S"
date -u | tee -a "$S"
for t in open nvrtc_compile ops graphs q8_accuracy f16_activations cuda_whisper cuda_batch cuda_parakeet; do
  echo "=== $t" | tee -a "$S"
  timeout 200 /tmp/b/$t --test-threads=1 --nocapture > "$O/test-$t.log" 2>&1 || echo "FAILED: $t" | tee -a "$S"
  grep -E "test result|SKIPPED|panicked|rel L2|rel_l2" "$O/test-$t.log" | grep -v "^ok " | tail -8 | tee -a "$S"
done
tail -c 60000 $O/test-f16_activations.log > $O/f16act-ops.log
B="$O/bench.txt"
bench() { # name lane act bin
  local t0=$(date +%s.%N)
  STAPES_CUDA_F16_ACT=$3 timeout 150 /tmp/b/$4 bench --synthetic $1 --device cuda --lane $2 --iters 30 --batch 16 --decode-tokens 10 --json > /tmp/j.json 2>/tmp/j.err || echo "FAILED bench $1 $2 act$3 $4" | tee -a "$S"
  echo "### $1 $2 act16=$3 $4 ($(python3 -c "import time;print(round(time.time()-$t0,1))")s)" >> "$B"
  cat /tmp/j.json >> "$B"; echo >> "$B"; tail -3 /tmp/j.err >> "$B"
}
for m in whisper-large-v3-turbo whisper-tiny whisper-base parakeet-tdt-0.6b-v2; do
  for lane in f16 q8; do
    bench $m $lane 1 stapes; bench $m $lane 0 stapes
    [ $m = whisper-large-v3-turbo ] && bench $m $lane 1 stapes_before
  done
done
python3 - "$B" <<'PY' | tee -a "$S"
import json, re, sys
txt = open(sys.argv[1]).read()
for block in txt.split("### ")[1:]:
    head, _, rest = block.partition("\n")
    try:
        j = json.loads(rest[rest.index("{"):rest.rindex("}") + 1])
    except Exception as e:
        print(head, "no json", e); continue
    r = j.get("report", {})
    def med(k):
        v = r.get(k)
        return None if not isinstance(v, dict) else round(v.get("median_ms", float("nan")), 3)
    print(head, "encode", med("encode"), "batched", med("encode_batched"), "decode/token", med("decode_token"), "extra", r.get("extra"))
PY
echo "=== jfk tiny.en" | tee -a "$S"
for lane in f16 q8; do /tmp/b/stapes transcribe -m /tmp/tiny-en-q8_0.bin --device cuda --lane $lane samples/jfk.wav 2>&1 | tail -2 | tee -a "$S"; done
date -u | tee -a "$S"; (cd $O && tar czf logs.tgz test-*.log && rm -f test-*.log)
