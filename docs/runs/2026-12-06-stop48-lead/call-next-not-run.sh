#!/usr/bin/env bash
# Prepared for the next stop, not run (stop 48's device time ran out before a sixth call could
# start). Is what call 3's skipped passes saved their own work, or the GEMMs after them running on
# other data (stale buffers) at another clock under the power cap? Each class is built twice
# over main's crates (all `stapes` only; git checkout crates/ between builds; take fresh names
# if these are used):
#   vA = main                                  tools/bench/stage_device.sh vA ""
#   vN = the f16 norms skipped                 git apply ablation-v119-norms-skipped.diff.txt
#   vn = the norms storing zeros               git apply ln-zero-stores-untested.diff.txt
#   vR = the rel-attention skipped             git apply ablation-v120-rel-attn-skipped.diff.txt
#   vr = the rel-attention storing zeros       git apply ablation-rel-zero-stores-untested.diff.txt
#   vG = act_e4m3 + glu_dw_act skipped         git apply ablation-v121-act-glu-skipped.diff.txt
#   vg = act_e4m3 + glu_dw_act storing zeros   git apply ablation-act-glu-zero-stores-untested.diff.txt
# (diffs in docs/runs/2026-12-06-stop48-lead/). The zero forms do every load and all the
# arithmetic; a runtime test that bounds no loop (eps, scale, act) zeroes what they store. Carry
# the seven dist/*.tar.xz (~42 MB). A zero form that runs like its skipped form says the saving
# was the GEMMs on other data; one that runs like main says it was the pass's own work.
V=vA source tools/bench/device_env.sh
for v in vN vn vR vr vG vg; do tar -xJf dist/$v.tar.xz -C /tmp/x; done
P=parakeet-tdt-0.6b-v2
for r in 1 2; do for v in vA vN vn; do e $v whisper-large-v3-turbo f16; done; done
# the clock each build runs at under load (400 encodes, ~2 s): the confound seen directly
for v in vA vN vn; do E_ITERS=400 w e $v whisper-large-v3-turbo f16; done
for r in 1 2; do for v in vA vN vn vR vr vG vg; do e $v $P q8 16; done; done
for v in vA vR vr; do e $v $P; done
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader
echo "done, elapsed $(el) s"
