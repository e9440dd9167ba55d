#!/usr/bin/env bash
# Stop 61, call 3b (inline, on call 3's warm H100; /tmp/x from call 3's dist/c23): the one-clip
# bisect, the CLI at six commits between vM (2fabc29) and vP, then vP with rel_attn's tail off,
# 16 frames a glu_dw_act block forced and 1 stem frame forced, then vM and vP again.
PACK= V=vP bash -c 'O=$OUT; source <(sed -n "/^e() {/,/^}/p" tools/bench/device_env.sh); export STAPES_CACHE=/tmp/c2; mkdir -p /tmp/t2; P=parakeet-tdt-0.6b-v2; for v in vM b8f2d3dd bdb696bc b0ea7c8b bd44646a b88f5787 be024acf vP; do e $v $P q8; done; STAPES_CUDA_REL_TAIL=0 e vP $P q8 | sed "s/^/tail0 /"; STAPES_CUDA_GDW_ROWS=16 e vP $P q8 | sed "s/^/gdw16 /"; STAPES_CUDA_STEM_FRAMES=1 e vP $P q8 | sed "s/^/stem1 /"; e vM $P q8; e vP $P q8' 2>&1 | tee $OUT/bisect.txt
