#!/usr/bin/env bash
# Stop 35 call 3: build v64x = v64 (f4b8b87's code) + STAPES_X bits dropping one FP8 GEMM's bias
# (timing only, wrong outputs): 32 q|k|v (N 3840), 64 out (1280 x 1280), 128 fc2 (K 5120).
# Carry dist/v64x.tar.xz dist/run35.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 X=/tmp/x64
mkdir -p $X $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v64x.tar.xz -C $X
q() { python3 -c 'import json,sys,re; d=json.load(sys.stdin); r=d["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); c=str(d.get("counters")); f=lambda k: (re.search(k+r": (\d+)", c) or [None,None])[1]; print("enc_dev", g("encode_device"), "enc", g("encode"), "fp8", f("gemm_q8_fp8"))'; }
b() { timeout 90 $X/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane $1 --iters 30 --batch 1 --decode-tokens 2 --json 2>/tmp/t2/err.txt | tee $O/turbo-$1-$2.json | q || tail -3 /tmp/t2/err.txt; }
for x in 0 32 64 128; do STAPES_X=$x b q8 warm$x >/dev/null; done
for r in 1 2 3; do for x in 0 32 64 128 224; do echo "X=$x q8 r$r: $(STAPES_X=$x b q8 x$x-r$r)"; done; done
date -u
