#!/usr/bin/env bash
# Stop 57, call 2: PACK = dist/c2/all.tar.xz (tools/bench/pack_bundles.sh c2 vI): vI = main's
# head with the e4m3 SiLU hidden on by default (STAPES_CUDA_HIDDEN_E4M3=0 turns it off). vI's GPU
# tests (cuda_parakeet's new q8_past_512_rows_holds_the_family_bar_with_the_e4m3_hidden among
# them; the launch counts of cuda_fc_kernels), the A/B of the hidden forms (16 parakeet clips,
# alternating), and on an H100 ncu's sections for one 16-clip launch of glu_dw_act and of the
# out projection's GEMM (the next levers). On an H200 whisper.cpp builds in the background and
# the comparison (stop 54's call-cmp.sh) runs vI beside PyTorch + graph and whisper.cpp.
# Carry dist/c2 dist/tools dist/wcpp.tar.xz.
set -uo pipefail
PACK=dist/c2/all.tar.xz V=vI source tools/bench/device_env.sh
wcpp_bg
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=150
for b in fp8 cuda_parakeet parakeet_batch cuda_canary cuda_gigaam cuda_fc_kernels cuda_fc_shapes cuda_label_loop conformer_ops graphs ln_pair fc_subsample q8_accuracy cuda_whisper attention pdl; do t $b; done
grep -E "hidden|^ok m" /tmp/o/cuda_parakeet.log /tmp/o/fp8.log | grep -E "hidden" | head -8
echo "tests done, elapsed $(el) s"
h() { STAPES_CUDA_HIDDEN_E4M3=$1 "${@:2}" | sed "s/^/hidden=$1 /"; }
for r in 1 2 3; do for m in 0 lut; do h $m e vI $P q8 16; done; done
for m in 0 lut; do h $m e vI $P f16 16; done
echo "bench done, elapsed $(el) s"
if [ $H200 = 0 ]; then
  for k in glu_dw_act "regex:nvjet.*96x192"; do
    timeout 150 ncu --set full -k "$k" --launch-skip 40 --launch-count 1 /tmp/x/vI/stapes bench --synthetic $P --device cuda --lane q8 --batch 16 --iters 1 > /tmp/o/ncu-full.txt 2>&1
    echo "ncu $k rc=$? elapsed $(el)"; n=$(echo $k | tr -dc 'a-z0-9_'); cp /tmp/o/ncu-full.txt $O/ncu-full-$n.txt
    grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Issue Slots Busy|Eligible Warps|No Eligible|Block Size|Grid Size|Waves Per SM|L2 Hit|Theoretical Occ" /tmp/o/ncu-full.txt | head -24
  done
fi
if [ -n "$WB" ]; then wait $WB; tail -3 /tmp/wcmake.log; ls -la /tmp/w/build/bin/ | grep whisper; fi
[ $H200 = 1 ] && CMP_LIMIT=$(( 585 - $(el) )) V=vI bash docs/runs/2026-12-06-stop54-lead/call-cmp.sh > /dev/null  # it appends to log.txt itself
[ $H200 = 1 ] && tail -42 $O/cmp.txt
echo "done, elapsed $(el) s"
