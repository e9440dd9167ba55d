#!/usr/bin/env bash
# Stop 33 call 6: select.rs's op test extended to select_tokens_feed (every request of both
# kernel forms: the same answer, one launch more, the step tensor's position and ids; a step
# tensor of the wrong size refused). v57 = 1cba757 + the test. Carry dist/v57 dist/run33.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b57
mkdir -p $B $STAPES_CACHE
date -u
tar -xJf dist/v57/bins.tar.xz -C $B && tar -xJf dist/v57/cache.tar.xz -C $STAPES_CACHE
timeout 120 $B/select --test-threads=1 2>&1 | tail -12
date -u
