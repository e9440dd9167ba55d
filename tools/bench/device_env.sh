# Sourced by the device-call scripts (docs/runs/*/call-*.sh), from the repository root on the GPU
# machine, with V naming the bundle from stage_device.sh: $OUT/log.txt gets everything, `el`
# says the seconds since, the bundle is unpacked as $B (its clips in STAPES_CACHE), the card is
# named, and `t BIN [FILTER] [SUFFIX]` runs a test binary into /tmp/o/BIN[SUFFIX].log and prints
# its result line and any failure or skip. With PACK (pack_bundles.sh's all.tar.xz) every bundle
# in it is unpacked into /tmp/x, V among them; without it, dist/V.tar.xz is, unless a call before
# this one on the same warm machine left /tmp/x/V there (rw_call.sh, ncu_call.sh).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
V=${V:?the bundle name, e.g. V=v107}
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
if [ -n "${PACK:-}" ]; then xz -dc "$PACK" | tar -C /tmp/x -xf -
elif [ ! -x "/tmp/x/$V/stapes" ]; then tar -xJf "dist/$V.tar.xz" -C /tmp/x; fi &&
  cp -r "/tmp/x/$V/audio" "$STAPES_CACHE/"
B=/tmp/x/$V
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { local s log=/tmp/o/$1${3:-}.log; s=$(date +%s)
  timeout "${TEST_LIMIT:-90}" "$B/$1" --test-threads=1 --nocapture ${2:-} > "$log" 2>&1
  echo "=== $1 ${2:-} ${3:-} rc=$? $(( $(date +%s)-s ))s $(grep -E '^test result' "$log" | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|programmatic" "$log" | head -8; }
# `e BUNDLE MODEL [LANE] [BATCH]`: one synthetic encode's device median and minimum (ms) from
# /tmp/x/BUNDLE/stapes (E_ITERS iterations, 20 unless set; lane q8, batch 1 unless named; a
# batch's whole encode), or its error's last lines.
e() { /tmp/x/$1/stapes bench --synthetic "$2" --device cuda --lane "${3:-q8}" --iters "${E_ITERS:-20}" --batch "${4:-1}" --json \
    2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; b=sys.argv[4] if len(sys.argv)>4 else "1"
r=r["encode_batched" if b!="1" else "encode_device"]
print(*sys.argv[1:], "%.3f ms (min %.3f)" % (r["median_ms"], r["min_ms"]))' "$@" || tail -3 /tmp/t2/e.err; }
# `w CMD…`: runs CMD while nvidia-smi samples the card every 20 ms, then prints the median SM
# clock and power over the busy samples (power above half the busiest): whether a build ran at
# another clock under the power cap.
w() { nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 20 > /tmp/t2/smi.csv &
  local sp=$!; "$@"; kill $sp 2>/dev/null; wait $sp 2>/dev/null
  python3 - /tmp/t2/smi.csv <<'PY'
import sys, statistics as st
rows = [tuple(float(v) for v in l.split(",")) for l in open(sys.argv[1]) if l.count(",") == 1]
peak = max((p for _, p in rows), default=0.0)
busy = [r for r in rows if r[1] > 0.5 * peak]
if busy: print("  smi: %d busy samples, SM %.0f MHz, %.0f W (medians)" % (len(busy), st.median(c for c, _ in busy), st.median(p for _, p in busy)))
PY
}
# `wcpp_bg`: on an H200 (any card with WCPP_ANY set), whisper.cpp (dist/wcpp.tar.xz: ggml-org/whisper.cpp's public tree without
# models/ bindings/ media/ samples/ tests/) configured and built with CUDA for sm_90 into
# /tmp/w/build/bin (whisper-bench, whisper-cli) in the background, unless already there (a warm
# machine keeps /tmp); sets WB to the build's pid (empty when none started) and H200 to 1 or 0.
# `wait $WB` before reading it; its log is /tmp/wcmake.log.
wcpp_bg() { local W=/tmp/w; WB=; H200=0
  nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && H200=1
  if { [ $H200 = 1 ] || [ -n "${WCPP_ANY:-}" ]; } && [ ! -x $W/build/bin/whisper-bench ]; then
    mkdir -p $W && xz -dc dist/wcpp.tar.xz | tar -C $W -xf -
    (cd $W && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF \
       -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/wcmake.log 2>&1 &&
     timeout "${WCPP_LIMIT:-480}" cmake --build build -j 12 --target whisper-bench whisper-cli >> /tmp/wcmake.log 2>&1
     echo "cmake rc $?" >> /tmp/wcmake.log) &
    WB=$!
  fi; }
# `wbench DIR [UNTIL]`: once wcpp_bg's build is done (waited for while `el` is under UNTIL, 540
# unless given), whisper-bench of the synthetic turbo, tiny and base ggml files that
# dist/tools/make_ggml_whisper.py writes, into DIR/wcpp-NAME.log for gpu_table.py, each started
# while `el` is under UNTIL + 30.
wbench() { local C=$1 u=${2:-540} W=/tmp/w/build/bin s
  if [ -n "${WB:-}" ]; then
    while kill -0 "$WB" 2>/dev/null && [ "$(el)" -lt "$u" ]; do sleep 5; done
    tail -2 /tmp/wcmake.log
  fi
  [ -x $W/whisper-bench ] || { echo "no whisper-bench build on this machine"; return 0; }
  for s in turbo tiny base; do
    [ "$(el)" -lt $(( u + 30 )) ] || break
    python3 dist/tools/make_ggml_whisper.py $s /tmp/ggml-$s.bin > /dev/null &&
      timeout 30 $W/whisper-bench -m /tmp/ggml-$s.bin -t 4 > "$C/wcpp-$s.log" 2>&1
    echo "whisper-bench $s rc=$? elapsed $(el)"
  done; }
# `peers UNTIL`: the comparison on this card into $O/cmp: ours and PyTorch + graph
# (gpu_compare.sh, 10 iterations, stopped at `el` = UNTIL - 20), then `wbench` (waited for until
# UNTIL), one table in $O/cmp.txt and the raw files as $O/cmp.tar.xz. Needs dist/tools carried.
peers() { local u=${1:-540} C=$O/cmp; mkdir -p "$C"
  STAPES=$B/stapes OUT=$C ITERS=10 TOOLS=dist/tools timeout $(( u - 20 - $(el) )) bash tools/bench/gpu_compare.sh > "$O/cmp-ours-torch.txt" 2>&1
  echo "ours and torch done, elapsed $(el) s"
  wbench "$C" "$u"
  python3 tools/bench/gpu_table.py "$C" | tee "$O/cmp.txt"
  (cd "$O" && tar -cJf cmp.tar.xz cmp && rm -rf cmp); }
