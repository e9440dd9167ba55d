#!/usr/bin/env bash
# Stop 53 call 5: vF = vN with fp8_norm_feeding_only_writes_e4m3_alone's read checks inside
# chains (outside one the backend keeps f32 activations, so no norm is elided there: call 3's
# failure). The fp8 test binary only. Carry dist/vF.tar.xz.
set -uo pipefail
V=vF source tools/bench/device_env.sh
TEST_LIMIT=120
t fp8
grep -E "^test " /tmp/o/fp8.log | head -20
echo "done, elapsed $(el) s"
