#!/usr/bin/env bash
# Stop 47, call 1. Bundle v110 = 3adc712 + stop 46's acte4-fast-untested.diff.txt (an experiment
# switch, off by default, not in git: STAPES_X_ACTE4=fast). Carry dist/v110.tar.xz and dist/tools.
# 1. the GPU tests on f8wg's fast SiLU (323c8ed) and the review commits (c7283f8, 3adc712);
# 2. stop 46's 16-clip A/B of act_e4m3's SiLU, and one clip of each family on main's defaults;
# 3. tools/bench/gpu_compare.sh for turbo, parakeet and canary beside PyTorch (same call);
# 4. ncu's duration of every kernel of a 16-clip bench run.
source tools/bench/device_env.sh
for b in fp8 cuda_parakeet cuda_canary cuda_gigaam parakeet_batch; do
  t $b; [ $(el) -gt 120 ] && break; done
echo "elapsed $(el) s"
e() { # acte4 model lane batch
  STAPES_X_ACTE4=$1 $B/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 20 --batch $4 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_batched" if sys.argv[4]!="1" else "encode_device"
print("acte4", *sys.argv[1:5], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 $4 || tail -3 /tmp/t2/e.err; }
P=parakeet-tdt-0.6b-v2
e exact $P q8 16 > /dev/null; for r in 1 2; do e exact $P q8 16; e fast $P q8 16; done
for mlb in "$P q8 1" "canary-1b-flash q8 1" "gigaam-v3-ctc q8 1" "whisper-large-v3-turbo f16 1"; do
  set -- $mlb; e exact $1 $2 $3; e exact $1 $2 $3; [ $(el) -gt 220 ] && break; done
echo "elapsed $(el) s"
MODELS="whisper-large-v3-turbo parakeet-tdt-0.6b-v2 canary-1b-flash" STAPES=$B/stapes OUT=/tmp/o/cmp \
  ITERS=10 TOOLS=dist/tools timeout 200 bash tools/bench/gpu_compare.sh
echo "elapsed $(el) s"
# where 16 clips go now: every kernel's duration over one bench run at --batch 16 --iters 1,
# grouped offline by (name, grid); the batched launches are the ones with 16-clip grids
[ $(el) -lt 420 ] && timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  --launch-count 3000 $B/stapes bench --synthetic $P --device cuda --lane q8 --audio samples/jfk.wav --iters 1 --batch 16 \
  > /tmp/o/ncu-16.csv 2>/tmp/t2/ncu.err || tail -3 /tmp/t2/ncu.err
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
