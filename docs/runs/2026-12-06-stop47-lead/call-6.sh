#!/usr/bin/env bash
# Stop 47, call 6. Bundles v114 = e62f7c1 + glu_dw_act's 16-byte loads (gdw_load_h8) and v112
# (e62f7c1's code). Carry both. 1. v114's tests over glu_dw_act; 2. v112 / v114 alternating on
# parakeet q8 16 clips and one clip, GigaAM and canary one clip; 3. ncu's duration of the
# glu_dw_act launches of one 16-clip bench run in each build.
V=v114 source tools/bench/device_env.sh
tar -xJf dist/v112.tar.xz -C /tmp/x
t conformer_ops; t fp8 conv_module; t cuda_parakeet; t parakeet_batch; t cuda_gigaam; t cuda_canary
echo "elapsed $(el) s"
e() { # bundle model batch
  /tmp/x/$1/stapes bench --synthetic $2 --device cuda --lane q8 --iters 20 --batch $3 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_batched" if sys.argv[3]!="1" else "encode_device"
print(*sys.argv[1:4], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' "$@" || tail -3 /tmp/t2/e.err; }
P=parakeet-tdt-0.6b-v2
for r in 1 2; do e v112 $P 16; e v114 $P 16; e v112 $P 1; e v114 $P 1; [ $(el) -gt 120 ] && break; done
e v112 gigaam-v3-ctc 1; e v114 gigaam-v3-ctc 1; e v112 canary-1b-flash 1; e v114 canary-1b-flash 1
echo "elapsed $(el) s"
for v in v112 v114; do [ $(el) -gt 160 ] && break
  timeout 40 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --kernel-name glu_dw_act \
    /tmp/x/$v/stapes bench --synthetic $P --device cuda --lane q8 --iters 1 --batch 16 > /tmp/o/ncu-glu-$v.csv 2>/tmp/t2/ncu.err || tail -2 /tmp/t2/ncu.err
  python3 - /tmp/o/ncu-glu-$v.csv $v <<'PY'
import csv,sys,collections
rows=[r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
h=rows[0]; g=h.index("Grid Size"); v=h.index("Metric Value"); d=collections.defaultdict(list)
for r in rows[1:]: d[r[g]].append(float(r[v].replace(",",""))/1000)
print(sys.argv[2], "  ".join("%s: %.2f us (n=%d)" % (k, sorted(x)[len(x)//2], len(x)) for k,x in sorted(d.items())))
PY
done
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
