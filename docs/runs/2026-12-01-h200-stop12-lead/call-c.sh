#!/usr/bin/env bash
set -uo pipefail
export STAPES_CACHE=/tmp/scache B=/tmp/b/bin T=dist/c W=/tmp/w/wcpp/build/bin
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/jfk.txt 2>&1; echo "jfk tiny.en stapes $l whole process $(ms $s) ms"; done; done; cat /tmp/jfk.txt
for i in 1 2 3; do s=$(date +%s%N); $W/whisper-cli -m /tmp/m/tiny.bin -f samples/jfk.wav -fa > /tmp/w.txt 2>&1; echo "whisper-cli tiny.en whole process (default beam 5, fa) $(ms $s) ms"; done; grep -E "^\[|encode time|decode time|batchd time|total time" /tmp/w.txt
for s in turbo tiny base; do python3 $T/make_ggml_whisper.py $s /tmp/g-$s.bin && $W/whisper-bench -m /tmp/g-$s.bin -t 4 2>&1 | grep -E "encode time|decode time|flash attn"; done
python3 $T/torch_anchor.py 2>&1 | tail -14
date -u
