#!/usr/bin/env bash
# Stop 43 call 5 (the session's last device seconds): v95 = v94 (b85cd1c) + glu_dw_act's loads
# unconditional on clamped addresses, 8 frames a thread in one round trip. conformer_ops (its
# glu cases against the composed reference, f32 eager and the f16 chain), then v94 / v95
# alternating on parakeet q8, one clip. Carry dist/v94.tar.xz dist/v95.tar.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/v94.tar.xz -C /tmp/x; tar -xJf dist/v95.tar.xz -C /tmp/x
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 80 /tmp/x/v95/conformer_ops --test-threads=1 > /tmp/t2/co.log 2>&1; echo "=== v95 conformer_ops rc=$? $(grep -E '^test result' /tmp/t2/co.log)"
grep -E "panicked|FAILED" /tmp/t2/co.log | head -5
e() { /tmp/x/$1/stapes bench --synthetic $2 --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]["encode_device"]; print(sys.argv[1], sys.argv[2], "%.3f ms (min %.3f)" % (r["median_ms"], r["min_ms"]))' $1 $2 || tail -2 /tmp/t2/e.err; }
for v in v94 v95; do e $v parakeet-tdt-0.6b-v2 > /dev/null; done
for r in 1 2 3; do for v in v94 v95; do e $v parakeet-tdt-0.6b-v2; done; [ $(el) -lt 120 ] || break; done
echo "done, elapsed $(el) s"
