#!/usr/bin/env bash
# Stop 56, between the calls on one warm machine: only keeps the carried parts of the real
# weights (dist/rwN/part, tools/bench/stage_real_weights.sh) in /tmp/rw. Carry one dist/rwN.
mkdir -p /tmp/rw; for d in dist/rw[0-9]*; do [ -f "$d/part" ] && cp "$d/part" "/tmp/rw/${d#dist/rw}"; done
ls -la /tmp/rw
