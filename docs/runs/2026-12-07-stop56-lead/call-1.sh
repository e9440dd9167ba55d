#!/usr/bin/env bash
# Stop 56, call 1: the first of back-to-back calls on one warm machine. PACK = dist/c1/all.tar.xz
# (tools/bench/pack_bundles.sh c1 vM vS): vM = main's head; vS = vM + the cuBLASLt search
# (`STAPES_CUDA_LT_SEARCH=1`: each shape's tuning also times the configurations cuBLASLt accepts
# beyond its heuristic's 8). whisper.cpp builds in the background (wcpp_bg) while vM's GPU tests
# run, then vS's GEMM-heavy tests with the search on; then each shape's pick with the search
# (heuristic best against searched best, --verbose), an A/B of vM and vS alternating (16 clips,
# one clip, canary, turbo), 16 clips and the turbo window under `w` (SM clock and power); then the
# comparison (stop 54's call-cmp.sh) with vM: ours beside PyTorch + graph and whisper.cpp in one
# run. On an H100 only vS's tests, the picks and the A/B run beside the whisper.cpp build (stop 55
# ran vM's tests and the comparison on an H100). Carry dist/c1 dist/tools dist/wcpp.tar.xz.
set -uo pipefail
PACK=dist/c1/all.tar.xz V=vM source tools/bench/device_env.sh
WCPP_ANY=1 WCPP_LIMIT=420 wcpp_bg
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=150
# on an H100 (stop 55 ran vM's tests and the comparison on one), only vS's tests and the A/B
[ $H200 = 1 ] && for b in fp8 conformer_ops cuda_parakeet parakeet_batch cuda_canary ln_pair graphs fc_subsample q8_accuracy cuda_whisper pdl; do t $b; done
export STAPES_CUDA_LT_SEARCH=1
B=/tmp/x/vS; for b in fp8 cuda_parakeet parakeet_batch; do t $b "" -search; done; B=/tmp/x/vM
unset STAPES_CUDA_LT_SEARCH
echo "tests done, elapsed $(el) s"
for m in "$P --batch 16" "$P" "whisper-large-v3-turbo --lane f16"; do
  STAPES_CUDA_LT_SEARCH=1 STAPES_CUDA_LT_CACHE=0 timeout 60 /tmp/x/vS/stapes --verbose bench --synthetic $m --device cuda --iters 2 2>&1 >/dev/null |
    grep "algorithm chosen" | sed 's/^.*DEBUG //' > /tmp/t2/picks.txt
  echo "--- search picks: $m ($(grep -c 'searched=true' /tmp/t2/picks.txt) of $(wc -l < /tmp/t2/picks.txt) shapes searched)"; cat /tmp/t2/picks.txt
done
s() { STAPES_CUDA_LT_SEARCH=1 "$@"; }
for r in 1 2 3; do e vM $P q8 16; s e vS $P q8 16; done
for r in 1 2; do e vM $P q8; s e vS $P q8; done
E_ITERS=10 e vM canary-1b-flash q8; E_ITERS=10 s e vS canary-1b-flash q8
for r in 1 2; do E_ITERS=10 e vM whisper-large-v3-turbo f16; E_ITERS=10 s e vS whisper-large-v3-turbo f16; done
E_ITERS=10 e vM whisper-large-v3-turbo q8; E_ITERS=10 s e vS whisper-large-v3-turbo q8
w e vM $P q8 16
E_ITERS=10 w e vM whisper-large-v3-turbo f16; E_ITERS=10 w e vM whisper-large-v3-turbo q8
echo "bench done, elapsed $(el) s"
if [ -n "$WB" ]; then wait $WB; tail -3 /tmp/wcmake.log; ls -la /tmp/w/build/bin/ | grep whisper; fi
[ $H200 = 1 ] && CMP_LIMIT=$(( 585 - $(el) )) V=vM bash docs/runs/2026-12-06-stop54-lead/call-cmp.sh > /dev/null  # it appends to log.txt itself
[ $H200 = 1 ] && tail -42 $O/cmp.txt
echo "done, elapsed $(el) s"
