#!/usr/bin/env bash
# Not run (stop 36 had no device time left): the check of `pdl-launch-order-edges-untested.diff.txt`
# (apply it to main; build `stapes` and the pdl, graphs, fp8, cuda_parakeet, cuda_canary,
# parakeet_batch, cuda_whisper test binaries as vNN; carry dist/vNN.tar.xz dist/au dist/tiny.bin.xz
# and this script). With STAPES_CUDA_PDL_EDGES=1 a capture rewrites each edge from a cuBLASLt
# GEMM into a PDL-safe kernel as a programmatic edge from the GEMM's launch-order port, so the
# kernel's launch is no longer paid after the GEMM (its griddepcontrol.wait still waits for the
# GEMM's completion). First the bits (pdl's new test, then the family tests with the edges on),
# then every encoder off/on alternating in one binary.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/bn
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
tar -xJf dist/vNN.tar.xz -C $B && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
t() { s=$(date +%s); timeout 240 $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 (edges ${STAPES_CUDA_PDL_EDGES:-0}) rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|edges|time:" -A2 /tmp/t2/$1.log | head -20; [ $rc -ne 0 ] && cp /tmp/t2/$1.log $O/; }
t pdl; t graphs
export STAPES_CUDA_PDL_EDGES=1
for x in fp8 cuda_parakeet cuda_canary parakeet_batch cuda_whisper; do t $x; done
unset STAPES_CUDA_PDL_EDGES
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print("enc_dev %.4f batch16 %s" % (r["encode_device"]["median_ms"], r.get("encode_batched")))'; }
b() { STAPES_CUDA_PDL_EDGES=$3 timeout 120 $B/stapes bench --synthetic $1 --device cuda --lane $2 $4 --json 2>/dev/null | q; }
P="--audio samples/jfk.wav --iters 20 --batch 16"; C="--iters 20 --batch 1"; W="--iters 20 --batch 1 --decode-tokens 2"
for mo in "parakeet-tdt-0.6b-v2|$P" "canary-1b-flash|$C" "whisper-large-v3-turbo|$W"; do
  m=${mo%%|*}; o=${mo#*|}
  b $m q8 0 "$o" > /dev/null
  for r in 1 2; do for l in q8 f16; do for e in 0 1; do echo "$m $l edges=$e r$r: $(b $m $l $e "$o")"; done; done; done
done
