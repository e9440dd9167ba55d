#!/usr/bin/env bash
# Stop 13 call 4b (same warm machine): second half, then jfk with the real base weights, stapes vs whisper-cli.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/scache; mkdir -p /tmp/scache /tmp/m /tmp/sb
date -u; ls /tmp/parts || { echo "first half missing: not the same machine"; exit 3; }
cat /tmp/parts/basepart.aa dist/by/basepart.ab | xz -dc > /tmp/m/base.bin
echo "sha ok? $(sha256sum /tmp/m/base.bin | cut -c1-64) vs $(cat dist/by/base.sha)"
xz -dc dist/by/stapes.xz > /tmp/sb/stapes && chmod +x /tmp/sb/stapes && tar -xJf dist/by/cache.tar.xz -C /tmp/scache
ms() { local s=$(date +%s%N); "$@" > /tmp/o.txt 2>&1; local rc=$?; echo "$(( ($(date +%s%N)-s)/1000000 )) ms rc=$rc"; }
for l in f16 q8; do for i in 1 2 3; do echo "stapes base $l (default beam 5): $(ms /tmp/sb/stapes transcribe -m /tmp/m/base.bin --device cuda --lane $l samples/jfk.wav)"; done; cat /tmp/o.txt; done
echo "stapes base f16 greedy: $(ms /tmp/sb/stapes transcribe -m /tmp/m/base.bin --device cuda --lane f16 --beam-size 1 samples/jfk.wav)"
for i in $(seq 1 50); do [ -f /tmp/w/done ] && break; sleep 5; done
cat /tmp/w/done 2>/dev/null || { echo "whisper.cpp not built yet"; tail -3 /tmp/w/build.log; }
W=/tmp/w/wcpp/build/bin
if [ -x $W/whisper-cli ]; then
  for i in 1 2 3; do echo "whisper-cli base (default beam 5, -fa): $(ms $W/whisper-cli -m /tmp/m/base.bin -f samples/jfk.wav -fa)"; done
  grep -E "^\[|total time|encode time|decode time|batchd time" /tmp/o.txt
  echo "whisper-cli base greedy (-bs 1 -bo 1): $(ms $W/whisper-cli -m /tmp/m/base.bin -f samples/jfk.wav -fa -bs 1 -bo 1)"
  for i in 1 2 3; do echo "stapes base f16 again: $(ms /tmp/sb/stapes transcribe -m /tmp/m/base.bin --device cuda --lane f16 samples/jfk.wav)"; done
fi
date -u
