#!/usr/bin/env bash
# Stop 48's two prepared calls in one lease (docs/runs/2026-12-06-stop48-lead/call-next-*.sh),
# bundles staged this stop from ac1a2af: vA = main, vB = + rel-made-position-term, vN/vn, vR/vr,
# vG/vg = the skipped / zero-storing forms. Eight separate bundles (54 MB) and the tracked tree
# (26 MB) pass run's 64 MiB, so they travel as one solid xz (dist/c49/all.tar.xz, 10.6 MB: the
# binaries differ only in their kernel strings) and are repacked here as the scripts expect.
set -uo pipefail
mkdir -p /tmp/stage /tmp/stage2
xz -dc dist/c49/all.tar.xz | tar -C /tmp/stage -xf -
for v in vA vB vN vn vR vr vG vg; do
  mv /tmp/stage/$v/b /tmp/stage2/$v
  tar -C /tmp/stage2 -cf - $v | xz -0 -T0 > dist/$v.tar.xz
done
D=docs/runs/2026-12-06-stop48-lead
timeout 330 bash $D/call-next-2-not-run.sh
unset STAPES_X_REL_BD
OUT=${OUT:-/tmp/out}/zero timeout 220 bash $D/call-next-not-run.sh
