#!/usr/bin/env bash
# Stop 48, call 2. v117 = 563e386 + the rel-attention's key tile in two cp.async groups (keys and
# position rows behind the previous tile's softmax and P·V, values behind the tile's scores) and
# the plain form's keys through ldmatrix; v118 = the two groups only; v116 = 563e386.
# 1. v117's tests; 2. 16 parakeet q8 clips and one clip of parakeet and canary, alternating;
# 3. ncu's duration of the rel-attention launches of one 16-clip encode and one clip, each build.
V=v117 source tools/bench/device_env.sh
tar -xJf dist/v116.tar.xz -C /tmp/x; tar -xJf dist/v118.tar.xz -C /tmp/x
t conformer_ops; t fp8; t pdl; t cuda_parakeet; t cuda_canary; t cuda_gigaam; t parakeet_batch; t graphs
echo "elapsed $(el) s"
P=parakeet-tdt-0.6b-v2
for r in 1 2; do for v in v116 v117 v118; do e $v $P q8 16; done; done
for r in 1 2; do for v in v116 v117 v118; do e $v $P; e $v canary-1b-flash; done; done
echo "elapsed $(el) s"
for v in v116 v117 v118; do for b in 16 1; do [ $(el) -gt 400 ] && break
  timeout 40 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --kernel-name regex:rel_attn \
    /tmp/x/$v/stapes bench --synthetic $P --device cuda --lane q8 --iters 1 --batch $b > /tmp/o/ncu-ra-$v-$b.csv 2>/tmp/t2/ncu.err || tail -2 /tmp/t2/ncu.err
  python3 - /tmp/o/ncu-ra-$v-$b.csv $v $b <<'PY'
import csv,sys,collections
rows=[r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
h=rows[0]; g=h.index("Grid Size"); k=h.index("Kernel Name"); v=h.index("Metric Value"); d=collections.defaultdict(list)
for r in rows[1:]: d[(r[k][:20], r[g])].append(float(r[v].replace(",",""))/1000)
print(*sys.argv[2:], "  ".join("%s %s: %.2f us (n=%d)" % (a, b, sorted(x)[len(x)//2], len(x)) for (a,b),x in sorted(d.items())))
PY
done; done
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
