#!/usr/bin/env bash
# Stop 59, call 2 (call 1 never ran: no machine came). PACK = dist/c16/all.tar.xz
# (pack_bundles.sh c16 vD): vD = main ebdb272,
# i.e. stop 58's code (glu_dw_act in blocks of 32 frames by default, 64 behind
# STAPES_CUDA_GDW_ROWS=64; the f16 norms' two-warps-a-row forms behind STAPES_CUDA_LN_WARPS=2|auto,
# one warp when unset) + fc_sub_stem with 1, 2 or 4 output frames a block (entries fc_sub_stem,
# fc_sub_stem2, fc_sub_stem4) behind STAPES_CUDA_STEM_FRAMES (1 by default) + rel_attn's last
# partial key tile without its dead products behind STAPES_CUDA_REL_TAIL=1 (off by default).
# - The tests stop 58 could not run on a GPU (ln_pair's two-warp test, conformer_ops' block-rows
#   bit identity), fc_subsample's new stem-frames bit identity, conformer_ops' rel_attn forms with
#   the tail skip, the family tests with each new form forced.
# - The A/B at 16 clips: the norms' warps, glu_dw_act's rows, the stem's frames a block; one clip,
#   f16 and canary with the norms' forms; rel_attn's tail skip; rel_attn_d128's warps a block.
# - On an H200: whisper.cpp built in the background, then the comparison beside PyTorch + graph
#   and whisper.cpp (stop 54's call-cmp.sh) with the forms the A/B picked. On an H100: nsys
#   traces of 16 clips in both norm forms.
# Carry dist/c16 dist/tools dist/wcpp.tar.xz.
set -uo pipefail
PACK=dist/c16/all.tar.xz V=vD source tools/bench/device_env.sh
wcpp_bg
P=parakeet-tdt-0.6b-v2
for b in ln_pair conformer_ops fc_subsample cuda_parakeet parakeet_batch cuda_canary cuda_whisper graphs; do t $b; done
for b in cuda_parakeet parakeet_batch cuda_canary; do STAPES_CUDA_LN_WARPS=2 t $b "" -w2; done
for b in cuda_parakeet parakeet_batch; do STAPES_CUDA_GDW_ROWS=64 t $b "" -r64; done
for b in cuda_parakeet parakeet_batch; do STAPES_CUDA_STEM_FRAMES=2 t $b "" -f2; done
for b in cuda_parakeet parakeet_batch cuda_canary; do STAPES_CUDA_REL_TAIL=1 t $b "" -tail; done
TEST_LIMIT=60 t pdl
echo "tests done, elapsed $(el) s"
l() { STAPES_CUDA_LN_WARPS=$1 "${@:2}" | sed "s/^/lnw=$1 /"; }
g() { STAPES_CUDA_GDW_ROWS=$1 "${@:2}" | sed "s/^/rows=$1 /"; }
for r in 1 2 3; do
  for w in 1 2; do l $w e vD $P q8 16; done
  for m in 32 64; do g $m l 1 e vD $P q8 16; done
  for f in 2 4; do STAPES_CUDA_STEM_FRAMES=$f e vD $P q8 16 | sed "s/^/stemf=$f /"; done
  STAPES_CUDA_REL_TAIL=1 e vD $P q8 16 | sed "s/^/tail=1 /"
done | tee /tmp/o/ab.txt
for w in 1 auto; do l $w e vD $P q8; done
for f in 1 2 4; do STAPES_CUDA_STEM_FRAMES=$f e vD $P q8 | sed "s/^/stemf=$f one clip /"; done
for x in 0 1; do STAPES_CUDA_REL_TAIL=$x e vD $P q8 | sed "s/^/tail=$x one clip /"; done
for w in 1 auto; do l $w e vD $P f16 16; done
for w in 1 auto; do l $w e vD canary-1b-flash q8; done
# rel_attn_d128's warps a block at 16 clips: 9 (the pick: 128 blocks, one a SM) against 5 (256
# blocks of 80 queries, two a SM by shared memory)
for r in 1 2; do for n in 9 5; do STAPES_CUDA_REL_WARPS=$n e vD $P q8 16 | sed "s/^/relw=$n /"; done; done
# the forms for the comparison: the norms' two warps (auto) where every two-warp 16-clip median
# beat every one-warp one; the stem's 2 or 4 frames a block likewise against the one-warp runs
# (1 frame a block), the faster of the two where both did; the tail skip likewise
read LNW STEMF TAIL < <(python3 - /tmp/o/ab.txt <<'PY'
import re, sys
m = {}
for l in open(sys.argv[1]):
    r = re.match(r"(lnw|stemf|tail)=(\d) vD \S+ q8 16 ([\d.]+) ms", l)
    if r: m.setdefault(r[1] + r[2], []).append(float(r[3]))
base = m.get("lnw1", [])
beats = lambda k: base and m.get(k) and max(m[k]) < min(base)
stem = [k for k in ("stemf2", "stemf4") if beats(k)]
stem = min(stem, key=lambda k: sorted(m[k])[len(m[k]) // 2])[5:] if stem else "1"
print("auto" if beats("lnw2") else "1", stem, "1" if beats("tail1") else "0")
PY
)
echo "bench done, elapsed $(el) s; the comparison runs with STAPES_CUDA_LN_WARPS=$LNW STAPES_CUDA_STEM_FRAMES=$STEMF STAPES_CUDA_REL_TAIL=$TAIL"
export STAPES_CUDA_STEM_FRAMES=$STEMF STAPES_CUDA_REL_TAIL=$TAIL
if [ $H200 = 1 ]; then
  if [ -n "$WB" ]; then wait $WB; tail -3 /tmp/wcmake.log; fi
  STAPES_CUDA_LN_WARPS=$LNW CMP_LIMIT=$(( 585 - $(el) )) V=vD bash docs/runs/2026-12-06-stop54-lead/call-cmp.sh > /dev/null
  tail -42 $O/cmp.txt
elif command -v nsys > /dev/null; then
  for w in 2 1; do
    [ $(el) -lt 400 ] || break
    STAPES_CUDA_LN_WARPS=$w timeout 100 nsys profile --cuda-graph-trace=node -o /tmp/o/p16-$w --force-overwrite true \
      $B/stapes bench --synthetic $P --device cuda --lane q8 --batch 16 --iters 3 > /tmp/o/nsys.log 2>&1
    echo "=== nsys lnw=$w rc=$? elapsed $(el)"
    nsys stats --report cuda_gpu_trace --format csv -o /tmp/o/t16-$w /tmp/o/p16-$w.nsys-rep > /dev/null 2>&1
    f=$(ls /tmp/o/t16-$w*.csv | head -1); xz -c "$f" > $O/nsys-16-lnw$w-trace.csv.xz
    python3 tools/bench/nsys_block.py "$f" --marker rel_attn_d128
  done
fi
echo "done, elapsed $(el) s"
