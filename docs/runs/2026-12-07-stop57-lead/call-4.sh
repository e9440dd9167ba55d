#!/usr/bin/env bash
# Stop 57, call 4: whether two half batches of 16 parakeet q8 clips, each a captured encoder on
# its own backend and stream, finish sooner side by side than the whole batch on one stream
# (crates/stapes/examples/two_streams.rs, kept here as two-streams-dropped.rs.txt; built at 3cd38f0 and stripped into dist/x4). Carry dist/x4.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; exec > >(tee -a "$O/log.txt") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE
for r in 1 2; do timeout 200 dist/x4/two_streams parakeet-tdt-0.6b-v2 16 20; done
timeout 120 dist/x4/two_streams parakeet-tdt-0.6b-v2 32 10
