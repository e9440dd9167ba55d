#!/usr/bin/env bash
# Prepared for the next stop, not run (no device time was left). The batched rel-attention with
# its position term made beforehand (`rel-made-position-term-untested.diff.txt`, behind the
# trial switch STAPES_X_REL_BD=1). `rel_qv` rounds (q+v)·qs to f16 as the plain kernel does. One
# cuBLAS GEMM a head gives bd (H, B·T, ldbd) f32 = qv·posᵀ. `rel_attn_bd_d128` is the plain form
# without the position MMAs, the score scratch and the staged position rows: it adds bd at
# column T-1-i+j, loaded while the tile's K and V land. It has 128 HMMAs where rel_attn_d128 has
# 224, and 17 KB of shared memory where it has 69 KB. The other kernels' SASS is byte-identical
# to main's. nvrtc_compile, pdl and clippy pass on the CPU.
# Stage (fresh names if these are used):
#   git apply docs/runs/2026-12-06-stop48-lead/rel-made-position-term-untested.diff.txt
#   tools/bench/stage_device.sh vB "conformer_ops cuda_parakeet cuda_canary parakeet_batch graphs pdl"
#   git checkout crates/; tools/bench/stage_device.sh vA ""
# Carry dist/vA.tar.xz dist/vB.tar.xz. 1. vB's tests: conformer_ops' rel_attention_forms_agree
# runs the made term (force_rel_bd) with 1-4 warps over every head-of-128 case (masks, several
# clips, 16 clips of the 0.6b shape): bits equal across warps, each within the Attention row of
# the reference, and its run counter proves it ran; the family tests with the switch on (they
# take it only where a fixture has heads of 128 on the plain form; a long input's term, over
# REL_BD_MAX_BYTES, never).
# 2. 16 parakeet q8 clips and one clip (there the split form runs, untouched), alternating.
# 3. ncu of the three launches
# against rel_attn_d128 at 16 clips (the position GEMM itself is not caught by the name filter:
# the wall time tells its share).
V=vB source tools/bench/device_env.sh
tar -xJf dist/vA.tar.xz -C /tmp/x
t conformer_ops
export STAPES_X_REL_BD=1
t cuda_parakeet; t cuda_canary; t parakeet_batch; t graphs; t pdl
echo "elapsed $(el) s"
P=parakeet-tdt-0.6b-v2
for r in 1 2 3; do e vA $P q8 16; e vB $P q8 16; done
e vA $P f16 16; e vB $P f16 16; e vA $P; e vB $P
echo "elapsed $(el) s"
for v in vA vB; do
  timeout 60 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --kernel-name regex:rel_ \
    /tmp/x/$v/stapes bench --synthetic $P --device cuda --lane q8 --iters 1 --batch 16 > /tmp/o/ncu-$v.csv 2>/tmp/t2/ncu.err || tail -2 /tmp/t2/ncu.err
done
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
