#!/usr/bin/env bash
# Stop 50, call 3: cuBLASLt with split K. vS = 3e0adb4 + `STAPES_CUDA_LT_SPLITK` (the tuner also
# times each heuristic candidate with K cut into 2 or 3 slices summed in f32, where cuBLASLt
# accepts it) and the chosen algorithm's slices in the `--verbose` log. Every run tunes afresh
# (STAPES_CUDA_LT_CACHE=0), so picks vary between runs as any fresh tuning does.
# Stage: tools/bench/stage_device.sh vS "fp8 cuda_parakeet cuda_canary parakeet_batch cuda_whisper";
#   tools/bench/pack_bundles.sh c50c vS   (carry dist/c50c)
# 1. the tests with split K offered; 2. each tuned GEMM's time and slices (--verbose), main's
# candidates against split K and 32 candidates; 3. 16 parakeet clips, one clip, turbo f16 one
# window and 16 windows, alternating.
set -uo pipefail
V=vS PACK=dist/c50c/all.tar.xz source tools/bench/device_env.sh
export STAPES_CUDA_LT_CACHE=0
for b in fp8 cuda_parakeet cuda_canary parakeet_batch cuda_whisper; do STAPES_CUDA_LT_SPLITK=2,3 t $b; done
mkdir -p $O/tests; cp /tmp/o/*.log $O/tests/
echo "elapsed $(el) s"
P=parakeet-tdt-0.6b-v2
v() { # tag env… : one verbose 16-clip run, the tuner's picks
  local tag=$1; shift
  env "$@" $B/stapes --verbose bench --synthetic $P --device cuda --lane q8 --iters 3 --batch 16 --json \
    2>$O/tune-$tag.log >/dev/null; grep -c "algorithm chosen" $O/tune-$tag.log; }
v main X=1; v splitk STAPES_CUDA_LT_SPLITK=2,3; v c32 STAPES_CUDA_LT_CANDIDATES=32; v c32splitk STAPES_CUDA_LT_CANDIDATES=32 STAPES_CUDA_LT_SPLITK=2,3
echo "elapsed $(el) s"
for r in 1 2 3; do
  e vS $P q8 16; STAPES_CUDA_LT_SPLITK=2,3 e vS $P q8 16
  STAPES_CUDA_LT_CANDIDATES=32 e vS $P q8 16; STAPES_CUDA_LT_CANDIDATES=32 STAPES_CUDA_LT_SPLITK=2,3 e vS $P q8 16
done
for r in 1 2; do e vS $P; STAPES_CUDA_LT_SPLITK=2,3 e vS $P; done
echo "elapsed $(el) s"
T=whisper-large-v3-turbo
for r in 1 2; do e vS $T f16; STAPES_CUDA_LT_SPLITK=2,3 e vS $T f16; done
E_ITERS=5 e vS $T f16 16; STAPES_CUDA_LT_SPLITK=2,3 E_ITERS=5 e vS $T f16 16
echo "done, elapsed $(el) s"
