#!/usr/bin/env bash
# Call 1 of stop 41: the first GPU run of Qwen3-ASR and the Gemma 4 audio tower, and stop 39's
# unrun GigaAM padded-batch and attention tests. Carry dist/v82.tar.xz (e893f5d: stapes and the
# test binaries cuda_qwen3a, cuda_gemma4a, cuda_gigaam, attention; stripped).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/v82.tar.xz -C /tmp/x; B=/tmp/x/v82
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout 150 $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|rel L2|rel |step 0|planted|padded|SKIPPED|margin" /tmp/t2/$1.log | head -24; cp /tmp/t2/$1.log $O/; }
t cuda_qwen3a
t cuda_gemma4a
t cuda_gigaam
t attention
echo "elapsed $(el) s"
q() { $B/stapes bench --synthetic qwen3-asr-0.6b --device cuda --lane $1 --audio samples/jfk.wav --iters 20 --json 2>/tmp/t2/q.err | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(sys.argv[1], "qwen3a tower %.3f ms, step %.3f ms, e2e %.1f ms" % (r["encode_device"]["median_ms"], r["decode_token"]["median_ms"], r["end_to_end"]["median_ms"]))' $1 || tail -3 /tmp/t2/q.err; }
for r in 1 2; do q q8; q f16; done
timeout 200 python3 tools/bench/qwen3a_torch.py --device cuda --dtype float16 --iters 10 --tokens 40 2>&1 | tail -5
echo "elapsed $(el) s"
for l in q8 f16; do echo "== gemma4-audio $l"; timeout 100 $B/stapes bench --synthetic gemma4-audio --device cuda --lane $l --audio samples/jfk.wav --iters 20 2>&1 | grep -v transcript | tail -4; done
timeout 120 python3 tools/bench/gemma4a_torch.py --device cuda --dtype float16 --iters 10 2>&1 | tail -3
echo "elapsed $(el) s"
for l in q8 f16; do $B/stapes bench --synthetic gigaam-v3-ctc --device cuda --lane $l --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(sys.argv[1], "gigaam 16 clips encode_batched %.3f ms, one clip %.3f ms" % (r["encode_batched"]["median_ms"], r["encode_device"]["median_ms"]))' $l; done
echo "elapsed $(el) s"
[ $(el) -lt 420 ] && { timeout 120 ncu --csv --page raw --metrics gpu__time_duration.sum $B/stapes bench --synthetic qwen3-asr-0.6b --device cuda --lane q8 --audio samples/jfk.wav --iters 1 --decode-tokens 2 > $O/ncu-qwen3a-q8.csv 2>/dev/null
python3 - "$O/ncu-qwen3a-q8.csv" <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
h = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if h is None: sys.exit("no ncu rows")
k, t = rows[h].index("Kernel Name"), rows[h].index("gpu__time_duration.sum")
agg = collections.Counter(); cnt = collections.Counter()
for r in rows[h + 2:]:
    try: agg[r[k][:60]] += float(r[t]); cnt[r[k][:60]] += 1
    except (ValueError, IndexError): pass
tot = sum(agg.values())
for name, ns in agg.most_common(14): print(f"{ns/1e3:9.1f} us {100*ns/tot:5.1f} % n={cnt[name]:4d} {name}")
PY
}
echo "done, elapsed $(el) s"
