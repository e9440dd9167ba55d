#!/usr/bin/env bash
# Stop 48, call 5: what the f16 norms' in-graph cost is made of (call 4: the statistics cost
# nothing; call 3: skipping the norms saves ~0.5 ms of a turbo window). v124 = 563e386 with the
# norms letting the next kernel on (PDL_LAUNCH_DEPENDENTS) only after their stores; v125 =
# 563e386 with X_NO_GB=1 taking the plain norm (gamma/beta after the sums, 69 registers) where
# main takes the _gb form; v119 = the norms skipped; v116 = 563e386. Turbo f16 one window and 16
# parakeet q8 clips, alternating.
V=v116 source tools/bench/device_env.sh
for v in v119 v124 v125; do tar -xJf dist/$v.tar.xz -C /tmp/x; done
P=parakeet-tdt-0.6b-v2
nb() { X_NO_GB=1 e "$@"; }
for r in 1 2 3; do e v116 whisper-large-v3-turbo f16; e v124 whisper-large-v3-turbo f16
  nb v125 whisper-large-v3-turbo f16; e v119 whisper-large-v3-turbo f16; done
for r in 1 2; do for v in v116 v124 v119; do e $v $P q8 16; done; done
echo "elapsed $(el) s"
tar -C /tmp/o -cJf $O/out.tar.xz . 2>/dev/null
echo "done, elapsed $(el) s"
