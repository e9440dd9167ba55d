#!/usr/bin/env bash
# Stop 54, call 1: the first of back-to-back calls on one warm machine. PACK = dist/c1/all.tar.xz
# (tools/bench/pack_bundles.sh c1 vM vR vQ): vM = main's head (5c9f53e); vR = vM + the plain
# rel-attention with double-buffered K/V and position tiles and up to 9 warps a block (a block a
# clip and head at 16 clips); vQ = vR with the position rows in a ring (a tile loads only its 32
# new rows). whisper.cpp builds in the background (wcpp_bg) while the GPU tests run: vQ's whole
# list (fp8 first: stop 53's new test has not fully run on a GPU), vR's rel-attention tests. Then
# 16 parakeet clips vM / vR / vQ / vQ at 3 and 5 warps (STAPES_CUDA_REL_WARPS), alternating, three
# rounds; one clip, canary, f16. Then call-cmp.sh on the winner. Carry dist/c1 dist/tools dist/wcpp.tar.xz.
set -uo pipefail
mkdir -p /tmp/rw; for d in dist/rw[0-9]*; do [ -f "$d/part" ] && cp "$d/part" "/tmp/rw/${d#dist/rw}"; done
PACK=dist/c1/all.tar.xz V=vQ source tools/bench/device_env.sh
WCPP_ANY=1 WCPP_LIMIT=420 wcpp_bg
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=150
for b in fp8 conformer_ops cuda_parakeet parakeet_batch cuda_canary ln_pair graphs fc_subsample q8_accuracy cuda_whisper pdl; do t $b; done
B=/tmp/x/vR; for b in conformer_ops parakeet_batch; do t $b "" -vR; done
echo "tests done, elapsed $(el) s"
rw() { export STAPES_CUDA_REL_WARPS=$1; echo -n "warps=$1 "; shift; "$@"; unset STAPES_CUDA_REL_WARPS; }
for r in 1 2 3; do e vM $P q8 16; e vR $P q8 16; e vQ $P q8 16; rw 3 e vQ $P q8 16; rw 5 e vQ $P q8 16; done
for r in 1 2; do e vM $P q8; e vQ $P q8; done
E_ITERS=10 e vM canary-1b-flash q8; E_ITERS=10 e vQ canary-1b-flash q8
e vM $P f16 16; e vQ $P f16 16
echo "bench done, elapsed $(el) s"
if [ -n "$WB" ]; then wait $WB; tail -3 /tmp/wcmake.log; ls -la /tmp/w/build/bin/ | grep whisper; fi
# the comparison (call-cmp.sh) on the same machine: vQ where its tests passed and its 16 clips
# beat vM's (the medians of the three rounds), else vM
pick=$(python3 - "$O/log.txt" <<'PY'
import re, statistics as st, sys
log = open(sys.argv[1]).read()
ok = all(re.search(r"=== %s {3}rc=0 .*test result: ok" % b, log) for b in ["conformer_ops", "cuda_parakeet", "parakeet_batch", "fp8"])
med = lambda v: st.median(float(x) for x in re.findall(r"^%s parakeet-tdt-0.6b-v2 q8 16 ([0-9.]+) ms" % v, log, re.M) or [1e9])
print("vQ" if ok and med("vQ") < med("vM") else "vM")
PY
)
echo "comparison with $pick, elapsed $(el) s"
CMP_LIMIT=$(( 585 - $(el) )) V=$pick bash docs/runs/2026-12-06-stop54-lead/call-cmp.sh > /dev/null  # it appends to log.txt itself
tail -42 $O/cmp.txt
echo "done, elapsed $(el) s"
