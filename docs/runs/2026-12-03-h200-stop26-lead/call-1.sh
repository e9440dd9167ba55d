#!/usr/bin/env bash
# Stop 26 call 1: cuBLASLt's whole algorithm space for the encoder GEMMs (examples/lt_search.rs),
# then the vendor attention kernels on the turbo self-attention shape (sdpa.py, stop 25's script).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 260 dist/lts/lt_search 16 turbo turbo16 > $O/lts-turbo.txt 2>&1; echo "lts turbo rc=$?"
grep SUMMARY $O/lts-turbo.txt; grep -E "algorithm ids|timed " $O/lts-turbo.txt
date -u
timeout 80 dist/lts/lt_search 8 parakeet > $O/lts-parakeet.txt 2>&1; echo "lts parakeet rc=$?"
grep SUMMARY $O/lts-parakeet.txt
date -u
timeout 150 python3 dist/sdpa/sdpa.py 2>&1 | grep -v Warning
date -u
