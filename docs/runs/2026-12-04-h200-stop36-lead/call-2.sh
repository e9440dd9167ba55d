#!/usr/bin/env bash
# Stop 36 call 2: the cluster form's timing as graph replays (build v69b: linear_add_norms test).
# Carry dist/v69b.tar.xz dist/run36.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
mkdir -p /tmp/b69b && tar -xJf dist/v69b.tar.xz -C /tmp/b69b
date -u
timeout 200 /tmp/b69b/linear_add_norms --test-threads=1 --nocapture cluster_form_timing 2>&1 | grep -E "µs|test result|panicked"
timeout 200 /tmp/b69b/linear_add_norms --test-threads=1 --nocapture cluster_form_timing 2>&1 | grep -E "µs|test result|panicked"
date -u
