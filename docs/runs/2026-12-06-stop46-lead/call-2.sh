#!/usr/bin/env bash
# Stop 46 call 2 (bundle v108 = main 5a0e0a1 + an experiment switch, not in git: STAPES_X_ACT=fast
# runs f8wg's SiLU epilogue on act_apply_fast, =none drops the SiLU, =noy8 drops the e4m3 copy;
# the last two for timing only). Why is fc1 (128 blocks) 9.0 µs where q|k|v (96 blocks of the
# same work) is 6.2? ncu per variant over the f8wg launches of one parakeet q8 clip, ncu's full
# set on fc1 and q|k|v, then fast/exact end to end.
source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2
n() { # variant
  STAPES_X_ACT=$1 timeout 100 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --kernel-name regex:f8wg_n72 --launch-skip 400 --launch-count 32 $B/stapes bench --synthetic $P --device cuda --lane q8 \
    --audio samples/jfk.wav --iters 1 > /tmp/o/ncu-$1.csv 2>/tmp/t2/ncu.err || tail -3 /tmp/t2/ncu.err
  python3 - /tmp/o/ncu-$1.csv $1 <<'PY'
import csv,sys,collections
rows=[r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
h=rows[0]; g=h.index("Grid Size"); v=h.index("Metric Value")
d=collections.defaultdict(list)
for r in rows[1:]: d[r[g]].append(float(r[v].replace(",",""))/1000)
print(sys.argv[2], "  ".join("%s: %.2f us (n=%d)" % (k, sorted(x)[len(x)//2], len(x)) for k,x in sorted(d.items())))
PY
}
for v in exact fast none noy8 exact; do n $v; done
echo "elapsed $(el) s"
timeout 150 ncu --clock-control none --cache-control none --set full --kernel-name regex:f8wg_n72 --launch-skip 400 --launch-count 8 \
  --csv --page details $B/stapes bench --synthetic $P --device cuda --lane q8 --audio samples/jfk.wav --iters 1 > /tmp/o/ncu-full.csv 2>/tmp/t2/ncu.err || tail -3 /tmp/t2/ncu.err
echo "full: $(wc -l < /tmp/o/ncu-full.csv) lines, elapsed $(el) s"
e() { # act model
  STAPES_X_ACT=$1 $B/stapes bench --synthetic $2 --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]["encode_device"]
print("act", sys.argv[1], sys.argv[2], "%.3f ms (min %.3f)" % (r["median_ms"], r["min_ms"]))' $1 $2 || tail -3 /tmp/t2/e.err; }
for m in $P canary-1b-flash; do e exact $m > /dev/null; for r in 1 2; do e exact $m; e fast $m; done; done
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
