#!/usr/bin/env bash
# Stop 26 call 3: awg64 (`attention` test binary of build v23 = main's kernels, flash64_timing)
# beside the vendor attention kernels (sdpa.py) in one lease; cuBLASLt's whole algorithm space for
# the encoder GEMMs (examples/lt_search.rs, f16 bias as the encoder runs it); then build v26
# (main + STAPES_CUDA_LT_SEARCH, off unless set): turbo f16 with the tuner also timing up to 8
# fuller-wave configurations, against without, fresh tuning each run, alternating.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
date -u
export STAPES_CACHE=/tmp/c2 B=/tmp/b2 B6=/tmp/b6; mkdir -p $B $B6 $STAPES_CACHE
tar -xJf dist/v23/bins.tar.xz -C $B ./attention && tar -xJf dist/v23/cache.tar.xz -C $STAPES_CACHE
tar -xJf dist/v26/bins.tar.xz -C $B6 && tar -xJf dist/v26/cache.tar.xz -C $STAPES_CACHE
timeout 60 $B/attention flash64_timing --test-threads=1 --nocapture 2>&1 | grep -E "packed|test result" > $O/awg.txt
grep -E "awg64 where it runs, (unsplit|split auto)|test result" $O/awg.txt
timeout 60 python3 dist/sdpa/sdpa.py 2>&1 | grep -v Warning
date -u
timeout 60 dist/lts/lt_search 1 turbo > $O/lts-probe.txt 2>&1; echo "probe rc=$?"; head -30 $O/lts-probe.txt | cut -c1-200
if grep -q "heur #0" $O/lts-probe.txt; then
  timeout 200 dist/lts/lt_search 12 turbo turbo16 > $O/lts-turbo.txt 2>&1; echo "lts turbo rc=$?"
  grep SUMMARY $O/lts-turbo.txt; grep -E "algorithm ids|timed " $O/lts-turbo.txt
  date -u
fi
for r in 1 2 3; do
  for n in 0 8; do
    j=$(STAPES_CUDA_LT_CACHE=0 STAPES_CUDA_LT_SEARCH=$n timeout 100 $B6/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 10 --batch 16 --decode-tokens 2 --json 2>/dev/null)
    echo "search=$n round $r: $(echo "$j" | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(r["encode"]["median_ms"], r.get("encode_batched",{}).get("median_ms"))' 2>&1)"
  done
done
date -u
if grep -q "heur #0" $O/lts-probe.txt; then
  timeout 60 dist/lts/lt_search 5 parakeet > $O/lts-parakeet.txt 2>&1; echo "lts parakeet rc=$?"
  grep SUMMARY $O/lts-parakeet.txt
fi
date -u
