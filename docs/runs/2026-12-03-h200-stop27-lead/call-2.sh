#!/usr/bin/env bash
# Stop 27 call 2: where awg64's time goes (ncu, full set, one turbo launch of awg64_s4 and of
# awg64p_s4 from build v28's attention test), and one turbo layer norm (layer_norm_rows16 inside the
# replayed encoder graph).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c B=/tmp/b; mkdir -p $B $STAPES_CACHE
date -u; which ncu; ncu --version | tail -1
tar -xJf dist/v28/bins.tar.xz -C $B && tar -xJf dist/v28/cache.tar.xz -C $STAPES_CACHE
NV=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1); echo "nvcc: $NV"
[ -n "$NV" ] && $NV -O3 -arch=sm_90a -o /tmp/wgmb dist/run/wgmb.cu && timeout 60 /tmp/wgmb
date -u
for p in 0 1; do
  k=$([ $p = 0 ] && echo awg64_s4 || echo awg64p_s4)
  STAPES_CUDA_AWG_PIPE=$p timeout 100 ncu --set full -k regex:"^$k\$" -s 1 -c 1 --page details --print-units base \
    $B/attention wg_kernels_equal_flash64_bit_for_bit --test-threads=1 > $O/ncu-$k.txt 2>&1; echo "ncu $k rc=$?"
  grep -E "Duration|Elapsed Cycles|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc Active|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|Theoretical Occupancy|L1/TEX Hit|Memory Throughput" $O/ncu-$k.txt | head -30
  grep -iE "stall|pipe|tensor|xu" $O/ncu-$k.txt | head -40
done
date -u
timeout 120 ncu --set full -k regex:layer_norm_rows16 -s 40 -c 1 --page details --print-units base \
  $B/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 2 --decode-tokens 1 > $O/ncu-ln.txt 2>&1; echo "ncu ln rc=$?"
grep -E "Duration|Elapsed Cycles|DRAM Throughput|Memory Throughput|L2 Hit|L1/TEX Hit|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|Block Size|Grid Size|Registers Per" $O/ncu-ln.txt | head -20
grep -iE "stall" $O/ncu-ln.txt | head -20
date -u
