#!/usr/bin/env bash
# The FastConformer encoders on this 2-core CPU box: stapes (f32, q8) beside transformers'
# ParakeetEncoder (f32, torch dynamic int8) of the same shapes, 11 s of jfk, 2 threads each,
# ours / torch / ours in one run. Needs target/release/stapes and /tmp/tv (torch, transformers).
set -uo pipefail
S=target/release/stapes
ours() {
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do for l in f32 q8; do
    $S bench --synthetic $m --device cpu --threads 2 --lane $l --iters 5 --batch 0 --audio samples/jfk.wav --json 2>/dev/null \
      | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; e=r.get("encode_device") or r["encode"]; print("stapes", sys.argv[1], sys.argv[2], "median %.1f ms (min %.1f)" % (e["median_ms"], e["min_ms"]))' $m $l
  done; done; }
uptime
ours
/tmp/tv/bin/python tools/bench/fc_torch_cpu.py --threads 2 --iters 5 2>/dev/null
ours
uptime
