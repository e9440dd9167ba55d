#!/usr/bin/env bash
# Stop 35 call 1: head's (80a5969) CUDA tests the review touched, then timing trials on turbo q8
# (FP8) with build v63x = head + STAPES_X experiment bits (timing only):
#  1 feeding norms skip their f16 store, 2 attention skips its f16 store when it writes e4m3,
#  4 fc1 FP8 without GELU, 8 FP8 GEMMs without bias, 16 feeding norms launched with 0 rows.
# Carry dist/v63a.tar.xz dist/v63x.tar.xz dist/au dist/run35.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b63 X=/tmp/x63
mkdir -p $B $X $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v63a.tar.xz -C $B && tar -xJf dist/v63x.tar.xz -C $X && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
t() { s=$(date +%s); timeout 240 $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED" -A2 /tmp/t2/$1.log | head -20; [ $rc -ne 0 ] && cp /tmp/t2/$1.log $O/; }
for x in fp8 q8_mix q8_accuracy linear_add graphs attention; do t $x; done
date -u
q() { python3 -c 'import json,sys,re; d=json.load(sys.stdin); r=d["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); c=str(d.get("counters")); f=lambda k: (re.search(k+r": (\d+)", c) or [None,None])[1]; print("enc_dev", g("encode_device"), "enc", g("encode"), "fp8", f("gemm_q8_fp8"), "passes", f("fp8_passes"))'; }
b() { timeout 90 $1 bench --synthetic whisper-large-v3-turbo --device cuda --lane $2 --iters 30 --batch 1 --decode-tokens 2 --json 2>/tmp/t2/err.txt | tee $O/turbo-$2-$3.json | q || tail -3 /tmp/t2/err.txt; }
b $B/stapes q8 warm0 >/dev/null
for x in 4 8 12; do STAPES_X=$x b $X/stapes q8 warmx$x >/dev/null; done
for r in 1 2; do
  echo "head q8 r$r: $(b $B/stapes q8 head$r)"
  for x in 0 1 2 3 16 4 8 12; do echo "X=$x q8 r$r: $(STAPES_X=$x b $X/stapes q8 x$x-r$r)"; done
done
date -u
for r in 1 2; do
  echo "f16 r$r: $(b $B/stapes f16 f16-$r)"
  echo "pdl=all q8 r$r: $(STAPES_CUDA_PDL=all b $B/stapes q8 pdl$r)"
  echo "fresh-tune 8 q8 r$r: $(STAPES_CUDA_LT_CACHE=0 b $B/stapes q8 ft8-$r)"
  echo "fresh-tune 32 q8 r$r: $(STAPES_CUDA_LT_CACHE=0 STAPES_CUDA_LT_CANDIDATES=32 b $B/stapes q8 ft32-$r)"
done
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
date -u
