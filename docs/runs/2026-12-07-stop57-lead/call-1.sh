#!/usr/bin/env bash
# Stop 57, call 1: the first of back-to-back calls on one warm machine. PACK = dist/c1/all.tar.xz
# (tools/bench/pack_bundles.sh c1 vH): vH = main's head, whose e4m3 SiLU hidden is off unless
# STAPES_CUDA_HIDDEN_E4M3 is `lut` or `math`. vH's GPU tests (fp8's new
# fp8_e4m3_hidden_is_the_silu_of_its_e4m3_preactivation among them), then the FastConformer
# family tests with the e4m3 hidden on; an A/B of the three hidden forms, alternating (16
# parakeet clips, 16 canary clips; one clip, which the form does not touch); on an H100 ncu of one
# 16-clip encode in each form. On an H200 whisper.cpp builds in the background (wcpp_bg) and the
# comparison (stop 54's call-cmp.sh) runs vH beside PyTorch + graph and whisper.cpp in one run.
# Carry dist/c1 dist/tools dist/wcpp.tar.xz.
set -uo pipefail
PACK=dist/c1/all.tar.xz V=vH source tools/bench/device_env.sh
wcpp_bg
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=150
for b in fp8 conformer_ops cuda_parakeet parakeet_batch cuda_canary cuda_gigaam ln_pair graphs fc_subsample q8_accuracy cuda_whisper attention pdl; do t $b; done
for m in lut math; do
  export STAPES_CUDA_HIDDEN_E4M3=$m
  for b in cuda_parakeet parakeet_batch cuda_canary cuda_gigaam; do t $b "" -$m; done
done
unset STAPES_CUDA_HIDDEN_E4M3
echo "tests done, elapsed $(el) s"
h() { STAPES_CUDA_HIDDEN_E4M3=$1 "${@:2}" | sed "s/^/hidden=$1 /"; }
for r in 1 2 3; do for m in 0 lut math; do h $m e vH $P q8 16; done; done
for r in 1 2; do for m in 0 lut; do E_ITERS=10 h $m e vH canary-1b-flash q8 16; done; done
for m in 0 lut; do h $m e vH $P q8; done
for m in 0 lut; do h $m w e vH $P q8 16; done
echo "bench done, elapsed $(el) s"
if [ $H200 = 0 ]; then
  for m in 0 lut; do
    STAPES_CUDA_HIDDEN_E4M3=$m timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
      /tmp/x/vH/stapes bench --synthetic $P --device cuda --lane q8 --batch 16 --iters 1 > /tmp/o/ncu-16-$m.csv 2>/tmp/t2/ncu.err
    echo "ncu hidden=$m rc=$? elapsed $(el)"; tail -1 /tmp/t2/ncu.err
    xz -9c /tmp/o/ncu-16-$m.csv > $O/ncu-16-$m.csv.xz
    python3 tools/bench/ncu_kernels.py /tmp/o/ncu-16-$m.csv --marker rel_attn_d128 --top 14 2>&1 | tail -34
  done
fi
if [ -n "$WB" ]; then wait $WB; tail -3 /tmp/wcmake.log; ls -la /tmp/w/build/bin/ | grep whisper; fi
[ $H200 = 1 ] && CMP_LIMIT=$(( 585 - $(el) )) V=vH bash docs/runs/2026-12-06-stop54-lead/call-cmp.sh > /dev/null  # it appends to log.txt itself
[ $H200 = 1 ] && tail -42 $O/cmp.txt
echo "done, elapsed $(el) s"
