#!/usr/bin/env bash
# Prepared as stop 46's call 3, never run: after call 2 every start found no machine, and those
# failed starts spent the device time.
# Bundle: main's head plus acte4-fast-untested.diff.txt (an experiment switch off by default, not
# in git: STAPES_X_ACTE4=fast runs act_e4m3's SiLU on act_apply_fast, the pass after cuBLASLt's
# fc1 where f8wg does not take it: 16 clips):
#   git apply docs/runs/2026-12-06-stop46-lead/acte4-fast-untested.diff.txt
#   tools/bench/stage_device.sh vNN "fp8 cuda_parakeet cuda_canary cuda_gigaam parakeet_batch"
#   git checkout crates/; cp -r ../shared/tools dist/tools    # carry dist/vNN.tar.xz, dist/tools
# It runs the family GPU tests on f8wg's fast SiLU (323c8ed: not yet run on a GPU), the 16-clip
# A/B, one clip of each FastConformer and turbo's window on main's defaults.
source tools/bench/device_env.sh
for b in fp8 cuda_parakeet cuda_canary cuda_gigaam parakeet_batch; do
  t $b; [ $(el) -gt 100 ] && break; done
echo "elapsed $(el) s"
e() { # acte4 model lane batch
  STAPES_X_ACTE4=$1 $B/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 20 --batch $4 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_batched" if sys.argv[4]!="1" else "encode_device"
print("acte4", *sys.argv[1:5], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 $4 || tail -3 /tmp/t2/e.err; }
P=parakeet-tdt-0.6b-v2
e exact $P q8 16 > /dev/null; for r in 1 2; do e exact $P q8 16; e fast $P q8 16; done
for mlb in "$P q8 1" "canary-1b-flash q8 1" "gigaam-v3-ctc q8 1" "whisper-large-v3-turbo f16 1"; do
  set -- $mlb; e exact $1 $2 $3; e exact $1 $2 $3; [ $(el) -gt 150 ] && break; done
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
