#!/usr/bin/env bash
# Stop 46 call 3 (bundle v109 = main c.f. ledger + an experiment switch off by default, not in git:
# STAPES_X_ACTE4=fast runs act_e4m3's SiLU on act_apply_fast, the pass after cuBLASLt's fc1 where
# f8wg does not take it: 16 clips). The family GPU tests on f8wg's fast SiLU, the 16-clip A/B,
# then the comparison table (ours and PyTorch) for the targets.
source tools/bench/device_env.sh
for b in fp8 cuda_parakeet cuda_canary cuda_gigaam parakeet_batch linear_add_norms conformer_ops; do
  t $b; [ $(el) -gt 200 ] && break; done
echo "elapsed $(el) s"
e() { # acte4 model batch
  STAPES_X_ACTE4=$1 $B/stapes bench --synthetic $2 --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --batch $3 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_batched" if sys.argv[3]!="1" else "encode_device"
print("acte4", *sys.argv[1:4], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 || tail -3 /tmp/t2/e.err; }
P=parakeet-tdt-0.6b-v2
e exact $P 16 > /dev/null; for r in 1 2 3; do e exact $P 16; e fast $P 16; done
echo "elapsed $(el) s"
STAPES=$B/stapes OUT=/tmp/o/cmp ITERS=10 TOOLS=dist/tools timeout 150 bash tools/bench/gpu_compare.sh > /tmp/o/cmp.txt 2>&1
tail -30 /tmp/o/cmp.txt
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
