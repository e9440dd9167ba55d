#!/usr/bin/env bash
# Stop 59, call 4: run inline on call 3's warm H100 (the bundle vD already in /tmp/x): 16 clips
# alternating main's forms, 2 stem frames with the tail skip, and 2 stem frames alone; then one
# clip, main's forms against both; then where nsys and ncu sit on that machine.
B=/tmp/x/vD; export STAPES_CACHE=/tmp/c2; P=parakeet-tdt-0.6b-v2
e() { $B/stapes bench --synthetic $P --device cuda --lane q8 --iters 20 --batch ${1} --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; r=r["encode_batched"] if sys.argv[1]!="1" else r["encode_device"]; print("%.3f" % r["median_ms"])' $1; }
for r in 1 2 3; do echo "base $(e 16)  both $(STAPES_CUDA_STEM_FRAMES=2 STAPES_CUDA_REL_TAIL=1 e 16)  stem2 $(STAPES_CUDA_STEM_FRAMES=2 e 16)"; done
echo "one clip base $(e 1) both $(STAPES_CUDA_STEM_FRAMES=2 STAPES_CUDA_REL_TAIL=1 e 1)"
ls /usr/local/cuda*/bin 2>/dev/null | grep -i nsys; which nsys ncu
