#!/usr/bin/env bash
# Stop 51 call 6: a probe for an H200 (h1 there: whisper.cpp built beside main's GPU tests, h2
# next on the same machine); on an H100 it only names the card. Carry dist/vM.tar.xz dist/tools
# dist/wcpp.tar.xz.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash docs/runs/2026-12-06-stop51-lead/call-h1.sh
fi
