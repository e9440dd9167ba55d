#!/usr/bin/env bash
# Stop 60, call 1: main's head (vG = 383e13f, the code of e4579aa: the review's fc_sub_stem template, never yet on a
# GPU) on whatever card comes. Carry dist/c19 (pack_bundles.sh c19 vM vG; vM = 2fabc29, the code
# of stop 55's comparison), dist/tools, dist/wcpp.tar.xz.
# 1. whisper.cpp's build in the background (on any card: a full comparison on one card either way).
# 2. The single-clip question of stop 59: vM and vG alternating on one card.
# 3. vG's GPU tests (the acceptance lists' and the new forms').
# 4. Ours and PyTorch + graph (gpu_compare.sh), then whisper-bench, one table.
set -uo pipefail
PACK=dist/c19/all.tar.xz V=vG source tools/bench/device_env.sh
cat $B/COMMIT
WCPP_ANY=1 wcpp_bg
for r in 1 2; do
  for v in vM vG; do e $v parakeet-tdt-0.6b-v2 q8; e $v canary-1b-flash q8; done
  for v in vM vG; do e $v parakeet-tdt-0.6b-v2 q8 16; done
done
echo "A/B done, elapsed $(el) s"
for b in cuda_whisper q8_accuracy graphs cuda_parakeet parakeet_batch cuda_canary cuda_gigaam gigaam_batch \
         cuda_label_loop cuda_fc_shapes fc_subsample conformer_ops fp8 ln_pair; do t $b; done
echo "tests done, elapsed $(el) s"
C=$O/cmp; mkdir -p $C
STAPES=$B/stapes OUT=$C ITERS=10 TOOLS=dist/tools timeout $(( 470 - $(el) )) bash tools/bench/gpu_compare.sh > $O/cmp-ours-torch.txt 2>&1
echo "ours and torch done, elapsed $(el) s"
if [ -n "$WB" ]; then
  while kill -0 $WB 2>/dev/null && [ $(el) -lt 500 ]; do sleep 5; done
  tail -2 /tmp/wcmake.log
  W=/tmp/w/build/bin
  if [ -x $W/whisper-bench ]; then
    for s in turbo tiny base; do
      [ $(el) -lt 560 ] || break
      python3 dist/tools/make_ggml_whisper.py $s /tmp/ggml-$s.bin > /dev/null &&
        timeout 30 $W/whisper-bench -m /tmp/ggml-$s.bin -t 4 > $C/wcpp-$s.log 2>&1
      echo "whisper-bench $s rc=$? elapsed $(el)"
    done
  fi
fi
python3 tools/bench/gpu_table.py $C | tee $O/cmp.txt
(cd $O && tar -cJf cmp.tar.xz cmp && rm -rf cmp)
echo "done, elapsed $(el) s"
