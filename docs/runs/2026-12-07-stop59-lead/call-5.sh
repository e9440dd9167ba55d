#!/usr/bin/env bash
# Stop 59, call 5: main e024acf (vE: fc_sub_stem's frames by shape, rel_attn's tail skip on) beside
# the peers in one run, fitted to ~400 s of device time: whisper.cpp built in the background
# (on an H200 only), the family tests, then tools/bench/gpu_compare.sh for ours and PyTorch +
# graph (10 iterations), then, once the build is done, whisper.cpp's whisper-bench on the same
# card into the same folder and the one table of ratios. Carry dist/c17 dist/tools dist/wcpp.tar.xz.
set -uo pipefail
PACK=dist/c17/all.tar.xz V=vE source tools/bench/device_env.sh
wcpp_bg
for b in cuda_parakeet parakeet_batch cuda_canary fc_subsample conformer_ops; do t $b; done
P=parakeet-tdt-0.6b-v2
for r in 1 2; do
  for x in 0 1; do STAPES_CUDA_REL_TAIL=$x STAPES_CUDA_STEM_FRAMES=$([ $x = 1 ] && echo 0 || echo 1) e vE $P q8 16 | sed "s/^/new=$x /"; done
done
echo "tests done, elapsed $(el) s"
C=$O/cmp; mkdir -p $C
STAPES=$B/stapes OUT=$C ITERS=10 TOOLS=dist/tools timeout $(( 300 - $(el) )) bash tools/bench/gpu_compare.sh > $O/cmp-ours-torch.txt 2>&1
echo "ours and torch done, elapsed $(el) s"
if [ -n "$WB" ]; then
  while kill -0 $WB 2>/dev/null && [ $(el) -lt 330 ]; do sleep 5; done
  tail -2 /tmp/wcmake.log
  W=/tmp/w/build/bin
  if [ -x $W/whisper-bench ]; then
    for s in turbo tiny base; do
      [ $(el) -lt 385 ] || break
      python3 dist/tools/make_ggml_whisper.py $s /tmp/ggml-$s.bin > /dev/null &&
        timeout 30 $W/whisper-bench -m /tmp/ggml-$s.bin -t 4 > $C/wcpp-$s.log 2>&1
      echo "whisper-bench $s rc=$? elapsed $(el)"
    done
  fi
fi
python3 tools/bench/gpu_table.py $C | tee $O/cmp.txt
(cd $O && tar -cJf cmp.tar.xz cmp && rm -rf cmp)
echo "done, elapsed $(el) s"
