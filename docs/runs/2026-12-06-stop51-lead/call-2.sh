#!/usr/bin/env bash
# Stop 51 call 2 (call 1's machine, warm): one clip, parakeet and canary q8, vA / vP / vPW
# alternating three rounds (call 1's vPW one-clip figures were slower than vA's), then parakeet
# f16 vA and vP. Carry dist/c51. (Run as one command line.)
V=vA PACK=dist/c51/all.tar.xz source tools/bench/device_env.sh; P=parakeet-tdt-0.6b-v2; for r in 1 2 3; do for v in vA vP vPW; do e $v $P; e $v canary-1b-flash; done; done; for v in vA vP; do E_ITERS=10 e $v $P f16; done; echo "elapsed $(el)"
