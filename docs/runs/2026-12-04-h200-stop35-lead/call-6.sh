#!/usr/bin/env bash
# Stop 35 call 6: what the bias fold and the tuner's rounds each give. Turbo one window, every
# process tuning afresh (STAPES_CUDA_LT_CACHE=0), alternating: q8 on v64t (f4b8b87 + the 3-round
# tuner, no bias fold) against v66 (708e3b3); f16 on v66 with 1 round against 3.
# Carry dist/v66.tar.xz dist/v64t.tar.xz dist/run35.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b66 A=/tmp/b64t
mkdir -p $B $A $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v66.tar.xz -C $B ./stapes && tar -xJf dist/v64t.tar.xz -C $A
q() { python3 -c 'import json,sys; d=json.load(sys.stdin); r=d["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print("enc_dev", g("encode_device"), "enc", g("encode"))'; }
b() { timeout 90 $1 bench --synthetic whisper-large-v3-turbo --device cuda --lane $2 --iters 30 --batch 1 --decode-tokens 2 --json 2>/tmp/t2/err.txt | tee $O/turbo-$3.json | q || tail -3 /tmp/t2/err.txt; }
b $B/stapes q8 warm >/dev/null
for r in 1 2 3 4; do
  echo "q8 v64t (tuner, no fold) r$r: $(STAPES_CUDA_LT_CACHE=0 b $A/stapes q8 v64t-r$r)"
  echo "q8 v66 (tuner + fold) r$r: $(STAPES_CUDA_LT_CACHE=0 b $B/stapes q8 v66-r$r)"
done
for r in 1 2 3; do
  echo "f16 v66 1 round r$r: $(STAPES_CUDA_LT_CACHE=0 STAPES_CUDA_LT_ROUNDS=1 b $B/stapes f16 f16r1-r$r)"
  echo "f16 v66 3 rounds r$r: $(STAPES_CUDA_LT_CACHE=0 b $B/stapes f16 f16r3-r$r)"
done
date -u
