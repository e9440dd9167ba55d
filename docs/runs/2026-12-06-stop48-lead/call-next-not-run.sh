#!/usr/bin/env bash
# Prepared for the next stop, not run (stop 48's device time ran out before its call 6 could
# start). Stage: v116 = 563e386 (`tools/bench/stage_device.sh v116 ""` on main's head before
# this stop's later commits is the same code: they change no crate), v119 = 563e386 with the
# three f16 norm entries returning after PDL_ENTER (call-3.sh's header), v126 =
#   git apply docs/runs/2026-12-06-stop48-lead/ln-zero-stores-untested.diff.txt
#   tools/bench/stage_device.sh v126 ""; git checkout crates/
# (new names if v1xx are taken). Carry dist/v116.tar.xz dist/v119.tar.xz dist/v126.tar.xz.
# Is the norms' ~0.5 ms (call 3: v119 skips them) their own work, or the next
# GEMMs running on different data? v126 = 563e386 with the f16 norms doing all their loads and
# arithmetic but storing zeros (masked by a runtime 0); v119 = the norms skipped (their outputs
# stale); v116 = 563e386. If v126 runs like v119, the saving is the GEMMs on zeros (power), not
# the norms' work. Turbo f16 one window, 16 parakeet q8 clips, alternating.
V=v116 source tools/bench/device_env.sh
for v in v119 v126; do tar -xJf dist/$v.tar.xz -C /tmp/x; done
for r in 1 2; do for v in v116 v126 v119; do e $v whisper-large-v3-turbo f16; done; done
for v in v116 v126 v119; do e $v parakeet-tdt-0.6b-v2 q8 16; [ $(el) -gt 100 ] && break; done
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader
echo "done, elapsed $(el) s"
