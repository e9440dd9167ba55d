#!/usr/bin/env bash
# Stop 33 call 3: where a turbo decoding step goes now (v54, steps queued ahead): ncu over the
# step kernels of two steady-state steps; and STAPES_CUDA_PDL_PREFETCH=1 against the default with
# steps queued ahead, alternating. Carry dist/v54 dist/au2 dist/run33.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b54
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v54/bins.tar.xz -C $B stapes && tar -xJf dist/v54/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
T=whisper-large-v3-turbo
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); x=r.get("extra") or {}; print("decode/token", g("decode_token"), "e2e29", x.get("end_to_end_29_tokens_ms"))'; }
b() { timeout 90 $B/stapes bench --synthetic $T --device cuda --lane f16 --audio samples/jfk.wav --iters 10 --batch 1 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
b > /dev/null
for r in 1 2 3; do
  echo "round $r default: $(b)"
  echo "round $r PDL_PREFETCH=1: $(STAPES_CUDA_PDL_PREFETCH=1 b)"
done
date -u
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  --kernel-name 'regex:^(step_|attn_|select_|embed_|write_rows)' --launch-skip 400 --launch-count 90 \
  $B/stapes bench --synthetic $T --device cuda --lane f16 --iters 1 --batch 1 --decode-tokens 40 > $O/ncu-turbo-step.csv 2>/tmp/t2/ncu.err
tail -2 /tmp/t2/ncu.err
python3 - $O/ncu-turbo-step.csv <<'PY'
import csv,sys,collections
rows=[r for r in csv.reader(open(sys.argv[1])) if len(r)>14 and r[12]=="gpu__time_duration.sum"]
print(len(rows),"kernels")
for r in rows[:60]: print(r[0], r[4][:40], r[8], r[14])
d=collections.defaultdict(list)
for r in rows: d[r[4][:40]].append(float(r[14].replace(",",""))/1000)
for k,v in sorted(d.items(), key=lambda kv:-sum(kv[1])): print(f"{k:40s} n={len(v)} sum={sum(v):.1f} mean={sum(v)/len(v):.2f}")
PY
date -u
