#!/usr/bin/env bash
# Prepared at stop 50, not run (a start failed and the device time left could not start
# another). Two changes, each an untested diff over 0983939 (crates as 3e0adb4):
# - ln-pair-e4m3-untested.diff.txt: `ln_pair_rows16` stores the second norm's rows as e4m3
#   where `next` runs on FP8. Call 5's profile: at 16 clips every block boundary ran the pair
#   (f16 only) and then `quant_fp8` of its second result for the next fc1, 4.0-4.3 µs a layer.
#   Expected ~0.1 ms at 16 clips.
# - f8wg-wide-untested.diff.txt: `f8wg_w2n144s6`, the few-row FP8 GEMM with two consumer
#   warpgroups (128 weight rows x 144 rows of x a block, 288 threads, 168 registers, no spills),
#   takes fc1 and its SiLU past 512 rows (`STAPES_CUDA_F8WG_WIDE=0` off), writing e4m3 only
#   inside `feeding_add_norms`. At 16 clips fc1 is cuBLASLt (19-23 µs) + `act_e4m3` (~12 µs
#   under ncu) over an 18 MB f16 hidden, twice a block. Win if the kernel's GEMM is within ~10 µs
#   of cuBLASLt's.
# Stage (fresh names if these are used):
#   D=docs/runs/2026-12-06-stop50-lead
#   git apply $D/ln-pair-e4m3-untested.diff.txt $D/f8wg-wide-untested.diff.txt
#   tools/bench/stage_device.sh vPW "fp8 ln_pair linear_add_norms conformer_ops pdl graphs
#     cuda_parakeet cuda_canary cuda_gigaam parakeet_batch gigaam_batch cuda_fc_shapes cuda_fc_kernels
#     cuda_qwen3a cuda_gemma4a"
#   git checkout crates/; git apply $D/ln-pair-e4m3-untested.diff.txt; tools/bench/stage_device.sh vP ""
#   git checkout crates/; git apply $D/f8wg-wide-untested.diff.txt; tools/bench/stage_device.sh vW ""
#   git checkout crates/; tools/bench/stage_device.sh vA ""
#   tools/bench/pack_bundles.sh c51 vA vP vW vPW            (carry dist/c51)
# 1. vPW's tests: fp8's fp8_norm_pair_writes_the_next_gemms_input and
#    fp8_wide_gemm_is_the_e4m3_product_of_its_input (the two-warpgroup fc1 + SiLU at 600, 1100
#    and 2240 rows against the host emulation and cuBLASLt's form; the pass test with it off),
#    fp8_feeding_add_norms_writes_e4m3_only (its 600- and 2240-row LinearAct passes now run
#    e4m3-only on the new kernel), pdl's PTX rule for the new entry, then the family tests.
# 2. 16 parakeet q8 clips: vA, vP, vW, vPW alternating, three rounds; vPW with the wide GEMM
#    off; one clip and canary (unchanged paths: ≤ 512 rows). 3. ncu: vW's f8wg_w2n144s6
#    against vA's cuBLASLt kernels and act_e4m3 (fc1 is the 192 x 192 or 96 x 192 nvjet kernel
#    just before each act_e4m3 in launch order).
set -uo pipefail
V=vPW PACK=dist/c51/all.tar.xz source tools/bench/device_env.sh
for b in fp8 ln_pair linear_add_norms conformer_ops pdl graphs cuda_parakeet cuda_canary cuda_gigaam \
  parakeet_batch gigaam_batch cuda_fc_shapes cuda_fc_kernels cuda_qwen3a cuda_gemma4a; do t $b; done
grep -h "fp8_norm_pair\|fp8_wide\|vs emulation\|vs cuBLASLt" /tmp/o/fp8.log | grep -i "wide\|pair\|m2240\|m1100\|m600" | head -20
mkdir -p $O/tests; cp /tmp/o/*.log $O/tests/
echo "elapsed $(el) s"
P=parakeet-tdt-0.6b-v2
for v in vA vP vW vPW; do E_ITERS=2 e $v $P q8 16 > /dev/null; done
for r in 1 2 3; do
  e vA $P q8 16; e vP $P q8 16; e vW $P q8 16; e vPW $P q8 16
done
STAPES_CUDA_F8WG_WIDE=0 e vPW $P q8 16
for v in vA vPW; do e $v $P; e $v canary-1b-flash; done
echo "elapsed $(el) s"
# fc1's kernels in one 16-clip bench run each (tuned above, outside ncu): vA's cuBLASLt GEMMs
# and act_e4m3, vW's f8wg_w2n144s6
for v in vA vW; do
  timeout 90 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --kernel-name regex:'f8wg_w2|act_e4m3|nvjet' /tmp/x/$v/stapes bench --synthetic $P --device cuda \
    --lane q8 --iters 1 --batch 16 > $O/ncu-fc1-$v.csv 2>/tmp/t2/ncu.err || tail -2 /tmp/t2/ncu.err
done
echo "done, elapsed $(el) s"
