#!/usr/bin/env bash
# Stop 45, call 4: the last 51 s of device time, on call 3-short's warm machine (v106 already
# unpacked in /tmp/x): one parakeet q8 clip, slices + e4m3 attention off / on, PDL steps /
# linked, while the 45 s lasted (run as one command line; the output is call-4/log.txt).
B=/tmp/x/v106; export STAPES_CACHE=/tmp/c2
for c in "0 steps" "1 steps" "1 linked" "0 steps" "1 steps" "1 linked"; do set -- $c
  STAPES_CUDA_F8WG_SPLIT=$1 STAPES_CUDA_REL_ATTN_E4M3=$1 STAPES_CUDA_PDL=$2 timeout 12 $B/stapes bench \
    --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --json 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]["encode_device"]; print(sys.argv[1:], "%.3f (min %.3f)" % (r["median_ms"], r["min_ms"]))' $1 $2
done
