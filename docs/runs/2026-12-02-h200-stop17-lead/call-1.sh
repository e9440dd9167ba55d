#!/usr/bin/env bash
# decoder step: the norm of the step GEMVs by block reductions (gamma/beta by cp.async ahead of
# the PDL wait), one-pass self-attention (attn_one): tests, then bench new vs old (HEAD b9a983e),
# ncu of a turbo step
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c3 B=/tmp/b3
mkdir -p $B $STAPES_CACHE /tmp/t3 /tmp/m /tmp/old /tmp/c0
tar -xJf dist/s1/bins.tar.xz -C $B && tar -xJf dist/s1/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/s0/stapes.xz > /tmp/old/stapes && chmod +x /tmp/old/stapes
tar -xJf dist/s0/cache.tar.xz -C /tmp/c0 && tar -xJf dist/au/audio.tar.xz -C /tmp/c0
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
date -u
run1() { local t=$1; local s=$(date +%s); timeout 250 "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t3/$t.log" 2>&1; local rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t3/$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t3/$t.log" | head -4; [ $rc = 0 ] || grep -A8 "panicked" "/tmp/t3/$t.log" | head -16; }
export -f run1
printf '%s\n' ops step_fused select cross_f16 cuda_whisper cuda_batch pdl graphs cuda_canary attention | xargs -P 4 -I{} bash -c 'run1 {}'
ARGS="cuda" run1 whisper_select
grep -h "one row\|attention_decode" /tmp/t3/ops.log | head -30
(cd /tmp/t3 && tar -cJf $O/logs.tar.xz *.log)
date -u
bench() { STAPES_CACHE=$3 $1 bench --synthetic $2 --device cuda --lane ${4:-f16} --audio samples/jfk.wav --iters 20 --batch 0 --decode-tokens 20 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]; e=r.get("extra",{})
print(sys.argv[1], "decode/token", round(r["decode_token"]["median_ms"],3), "encode", round(r["encode"]["median_ms"],3), "jfk29", round(e.get("end_to_end_29_tokens_ms",-1),2))' "$5 $2 ${4:-f16}"; }
for m in whisper-large-v3-turbo whisper-tiny whisper-base canary-1b-flash; do
  for rep in 1 2; do
  bench /tmp/old/stapes $m /tmp/c0 f16 before
  bench $B/stapes $m /tmp/c3 f16 after
  done
done
bench /tmp/old/stapes whisper-large-v3-turbo /tmp/c0 q8 before
bench $B/stapes whisper-large-v3-turbo /tmp/c3 q8 after
for v in STAPES_CUDA_PDL_PREFETCH=0 STAPES_CUDA_STEP_GEMV_FORM=wide STAPES_CUDA_STEP_GEMV_FORM=c1k1; do
  env $v bash -c "$(declare -f bench); bench $B/stapes whisper-large-v3-turbo /tmp/c3 f16 '$v'"
done
date -u
for w in old new; do
  S=$B/stapes; C=/tmp/c3; [ $w = old ] && S=/tmp/old/stapes && C=/tmp/c0
  STAPES_CACHE=$C timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --launch-skip 300 --launch-count 45 \
    --kernel-name regex:'step|select|gemv|attn_|embed|argmax|write_rows|layer_norm' \
    $S bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 1 --batch 0 --decode-tokens 12 > $O/ncu-step-$w.csv 2> /dev/null
  echo "ncu $w rc=$?"
done
python3 - $O/ncu-step-old.csv $O/ncu-step-new.csv <<'PY'
import csv,sys
def load(f):
    rows=list(csv.reader(open(f))); h=None; out=[]
    for r in rows:
        if 'Kernel Name' in r: h=r; continue
        if h and len(r)==len(h):
            v=float(r[h.index('Metric Value')].replace(',','')); u=r[h.index('Metric Unit')]
            v*= {'ns':1,'us':1e3,'usecond':1e3,'ms':1e6,'msecond':1e6}.get(u,1)
            out.append((r[h.index('Kernel Name')][:34], v))
    return out
a=load(sys.argv[1]); b=load(sys.argv[2])
for i in range(max(len(a),len(b))):
    x=a[i] if i<len(a) else ('',0); y=b[i] if i<len(b) else ('',0)
    print(f"{x[0]:36s} {x[1]/1000:8.2f} | {y[0]:36s} {y[1]/1000:8.2f}")
PY
xz -9 $O/ncu-step-*.csv
date -u
