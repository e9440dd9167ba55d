#!/usr/bin/env bash
# Not run (stop 36 had no device time left): the check of `mlp-add-norms-untested.diff.txt`
# (apply it to main, build `stapes` and the fp8, cuda_parakeet, cuda_canary, parakeet_batch test
# binaries as vNN, carry dist/vNN.tar.xz dist/au and this script). The new test
# fp8_mlp_norms_keep_the_silu_hidden_in_e4m3 (bits = linear_act_feeding + linear_add_norms), the
# FastConformer family tests, then parakeet q8 16 clips: main's binary against the patch's,
# alternating (the patch drops the SiLU pass's f16 store: ~18 MB of writes a pass at 16 clips).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/bn A=/tmp/ba
mkdir -p $B $A $STAPES_CACHE /tmp/t2
tar -xJf dist/vNN.tar.xz -C $B && tar -xJf dist/vMAIN.tar.xz -C $A && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
t() { s=$(date +%s); timeout 240 $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED" -A2 /tmp/t2/$1.log | head -20; [ $rc -ne 0 ] && cp /tmp/t2/$1.log $O/; }
for x in fp8 cuda_parakeet cuda_canary parakeet_batch; do t $x; done
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print("enc_dev %.4f batch16 %s" % (r["encode_device"]["median_ms"], r["encode_batched"]))'; }
b() { timeout 120 $1/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --batch 16 --json 2>/dev/null | q; }
b $B > /dev/null
for r in 1 2 3; do echo "main r$r: $(b $A)"; echo "patch r$r: $(b $B)"; done
