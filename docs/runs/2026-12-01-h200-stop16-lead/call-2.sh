#!/usr/bin/env bash
# profile a turbo decoder step: bench figures, ncu without cache flush, nsys timeline if present
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c; mkdir -p /tmp/c /tmp/p1
xz -dc dist/p1/stapes.xz > /tmp/p1/stapes && chmod +x /tmp/p1/stapes
tar -xJf dist/p1/cache.tar.xz -C /tmp/c && tar -xJf dist/d9/audio.tar.xz -C /tmp/c
S=/tmp/p1/stapes
which nsys ncu; ls /usr/local/cuda/bin | grep -i nsys; ls /opt/nvidia 2>/dev/null
$S bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --audio samples/jfk.wav --iters 10 --batch 0 --decode-tokens 20 --json 2>/dev/null > $O/bench.json
python3 -c '
import json; r=json.load(open("'$O'/bench.json"))["report"]
print({k:(round(v["median_ms"],3) if isinstance(v,dict) and "median_ms" in v else v) for k,v in r.items() if not isinstance(v,(list,str))})'
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --launch-skip 300 --launch-count 200 \
  --kernel-name regex:'step|select|gemv|attn_split|attn_combine|embed|argmax|write_rows|layer_norm' \
  $S bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 1 --batch 0 --decode-tokens 12 > $O/ncu-nocache.csv 2> $O/ncu.err
echo "ncu rc=$?"; tail -2 $O/ncu.err
NS=$(which nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NS" ]; then
  timeout 200 $NS profile --cuda-graph-trace=node -t cuda -o /tmp/prof -f true $S bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 1 --batch 0 --decode-tokens 12 > /dev/null 2>&1
  echo "nsys rc=$?"
  $NS stats --report cuda_gpu_trace --format csv -o $O/trace /tmp/prof.nsys-rep > /dev/null 2>&1; ls $O
  xz -9 $O/trace*.csv
fi
xz -9 $O/ncu-nocache.csv
