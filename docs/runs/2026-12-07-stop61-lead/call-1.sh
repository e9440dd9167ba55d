#!/usr/bin/env bash
# Stop 61, call 1 (prepared; no device came this stop). PACK = dist/c23 (pack_bundles.sh c23
# vP vM b8f2d3dd bdb696bc b0ea7c8b bd44646a b88f5787 be024acf): vP = main at 60888e0 (25df911's
# code plus the warpgroup attention's PIPE forms, off by default), vM = 2fabc29 (stop 55's code),
# and the stapes CLI at six commits between them. Carry dist/c23, dist/tools, dist/wcpp.tar.xz.
# 1. On an H200, whisper.cpp builds in the background.
# 2. vP's GPU tests: the acceptance lists' and the forms main changed (none of stop 60's last
#    two commits has run on a GPU).
# 3. One parakeet clip, vM and vP alternating (three rounds on an H200, else two); vP with rel_attn's tail off and with
#    32 frames a glu_dw_act block forced; canary one clip; 16 clips (two rounds).
# 4. On an H200: ours and PyTorch + graph (gpu_compare.sh), then whisper-bench, one table.
#    Then, on the same warm machine: the real weights (`V=vP bash tools/bench/rw_call.sh`, four
#    calls, one dist/rwN each) and the profile (`V=vP bash tools/bench/ncu_call.sh`).
#    On another card (stop 60 compared there): if vP is still > 0.04 ms behind vM at one clip,
#    the six commits between them, one clip each.
set -uo pipefail
PACK=dist/c23/all.tar.xz V=vP source tools/bench/device_env.sh
cat $B/COMMIT
wcpp_bg
P=parakeet-tdt-0.6b-v2; Cn=canary-1b-flash
for b in cuda_whisper q8_accuracy graphs cuda_parakeet parakeet_batch cuda_canary cuda_gigaam gigaam_batch \
         cuda_label_loop cuda_fc_shapes fc_subsample conformer_ops fp8 ln_pair pdl; do t $b; done
echo "tests done, elapsed $(el) s"
tail0() { STAPES_CUDA_REL_TAIL=0 e "$@" | sed 's/^/tail0 /'; }
R="1 2"; [ "$H200" = 1 ] && R="1 2 3"  # on an H200 the rounds run while whisper.cpp builds
for r in $R; do for v in vM vP; do e $v $P q8; done; done | tee /tmp/t2/one.txt
tail0 vP $P q8; STAPES_CUDA_GDW_ROWS=32 e vP $P q8 | sed 's/^/gdw32 /'
for v in vM vP; do e $v $Cn q8; done; tail0 vP $Cn q8
for r in ${R#1 }; do for v in vM vP; do e $v $P q8 16; done; tail0 vP $P q8 16; done
echo "A/B done, elapsed $(el) s"
gap=$(python3 - /tmp/t2/one.txt <<'PY'
import sys, statistics as st
d = {}
for l in open(sys.argv[1]):
    f = l.split()
    if len(f) > 3 and f[0] in ("vM", "vP"): d.setdefault(f[0], []).append(float(f[3]))
print("%.3f" % (st.median(d.get("vP", [0])) - st.median(d.get("vM", [0]))))
PY
)
echo "one-clip gap vP - vM: $gap ms"
if [ "$H200" = 1 ]; then
  C=$O/cmp; mkdir -p $C
  STAPES=$B/stapes OUT=$C ITERS=10 TOOLS=dist/tools timeout $(( 500 - $(el) )) bash tools/bench/gpu_compare.sh > $O/cmp-ours-torch.txt 2>&1
  echo "ours and torch done, elapsed $(el) s"
  wbench $C
  python3 tools/bench/gpu_table.py $C | tee $O/cmp.txt
  (cd $O && tar -cJf cmp.tar.xz cmp && rm -rf cmp)
elif python3 -c "import sys; sys.exit(0 if float('$gap') > 0.04 else 1)"; then
  for v in vM b8f2d3dd bdb696bc b0ea7c8b bd44646a b88f5787 be024acf vP; do e $v $P q8; done
fi
echo "done, elapsed $(el) s"
