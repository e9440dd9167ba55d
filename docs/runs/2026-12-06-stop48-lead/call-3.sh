#!/usr/bin/env bash
# Stop 48, call 3: what each pass costs inside the captured encode. Bundles are 563e386 with one
# class of kernels returning right after PDL_ENTER (their outputs left as they were: the timings
# bound the pass's cost in the graph, the results are wrong): v119 the f16 norms
# (layer_norm_rows16, _gb, ln_pair_rows16), v120 the rel-attention, v121 act_e4m3 and
# glu_dw_act; v116 = 563e386. On an H200, gpu_compare.sh on v116 too.
V=v116 source tools/bench/device_env.sh
for v in v119 v120 v121; do tar -xJf dist/$v.tar.xz -C /tmp/x; done
P=parakeet-tdt-0.6b-v2
for r in 1 2; do for v in v116 v119 v120 v121; do e $v $P q8 16; done; done
for v in v116 v119 v120 v121; do e $v $P; done
for r in 1 2; do for v in v116 v119; do e $v whisper-large-v3-turbo f16; done; done
echo "elapsed $(el) s"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  MODELS="whisper-large-v3-turbo parakeet-tdt-0.6b-v2 canary-1b-flash" STAPES=/tmp/x/v116/stapes OUT=/tmp/o/cmp \
    ITERS=10 TOOLS=dist/tools timeout 250 bash tools/bench/gpu_compare.sh
fi
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
