#!/usr/bin/env bash
# Stop 61, call 3: calls 1 and 2 folded into one ~450 s call, once 790 s of device time were
# left (call 1's last try was taken back mid-run). Carry dist/c23, dist/tools, dist/wcpp.tar.xz.
# 1. vP's GPU tests, `attention` (the PIPE forms bit for bit) among them.
# 2. One parakeet clip, vM (stop 55's code) and vP alternating, and 16 clips.
# 3. The PIPE forms off / on alternating: turbo q8 and f16 one window, tiny.
# 4. On an H200: ours and PyTorch + graph (gpu_compare.sh), and whisper-bench if its background
#    build is done by then.
set -uo pipefail
PACK=dist/c23/all.tar.xz V=vP source tools/bench/device_env.sh
cat $B/COMMIT
wcpp_bg
P=parakeet-tdt-0.6b-v2; T=whisper-large-v3-turbo
for b in attention cuda_whisper q8_accuracy graphs cuda_parakeet parakeet_batch cuda_canary cuda_gigaam \
         cuda_label_loop fc_subsample conformer_ops fp8 ln_pair pdl; do t $b; done
echo "tests done, elapsed $(el) s"
for r in 1 2; do for v in vM vP; do e $v $P q8; done; done
for v in vM vP; do e $v $P q8 16; done
echo "one-clip A/B done, elapsed $(el) s"
pe() { STAPES_CUDA_ATTN_PIPE=$1 e "${@:2}" | sed "s/^/pipe$1 /"; }
for r in 1 2; do for p in 0 1; do pe $p vP $T q8; pe $p vP $T f16; done; done
for p in 0 1; do pe $p vP whisper-tiny q8; done
echo "pipe A/B done, elapsed $(el) s"
if [ "$H200" = 1 ] && [ "$(el)" -lt 330 ]; then
  C=$O/cmp; mkdir -p $C
  STAPES=$B/stapes OUT=$C ITERS=10 TOOLS=dist/tools timeout $(( 540 - $(el) )) bash tools/bench/gpu_compare.sh > $O/cmp-ours-torch.txt 2>&1
  echo "ours and torch done, elapsed $(el) s"
  wbench $C 540
  python3 tools/bench/gpu_table.py $C | tee $O/cmp.txt
  (cd $O && tar -cJf cmp.tar.xz cmp && rm -rf cmp)
fi
echo "done, elapsed $(el) s"
