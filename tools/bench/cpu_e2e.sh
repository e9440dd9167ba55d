#!/usr/bin/env bash
# End-to-end CPU comparison on jfk.wav, whole-process timing with hyperfine (the Whisper issue's
# ledger row): stapes f32 and q8 vs faster-whisper float32 and int8 vs whisper.cpp, same weights
# (whisper.cpp reads the ggml file `stapes convert` writes), greedy, 2 threads.
# STAPES_BASE=path/to/older/stapes adds that build's f32 and q8 rows to the same hyperfine run.
# Needs: hyperfine (apt), a python with faster-whisper==1.2.1 ($PY), whisper.cpp's whisper-cli ($WCPP).
# stapes runs with --device cpu as the peers do (device='cpu', a CPU-only whisper.cpp build): the
# default `auto` first looks for CUDA libraries, ~0.1 s of CPU on a machine without them.
# Wall times are only comparable on an idle box (load average < 0.3): whisper.cpp and
# CTranslate2 spin-wait their threads and collapse when the cores are shared.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
WCPP=${WCPP:?set WCPP to whisper.cpp\'s whisper-cli}
CACHE=${STAPES_CACHE:-$HOME/.cache/stapes}
OUT=${OUT:-/tmp/stapes-cpu-e2e}
mkdir -p "$OUT"
STAPES=${STAPES:-target/release/stapes}
JFK=samples/jfk.wav
for m in ${MODELS:-whisper-tiny.en whisper-base}; do
  ggml="$OUT/$m.ggml.bin"
  [ -f "$ggml" ] || "$STAPES" convert "$m" "$ggml" --to ggml
  fw() { echo "$PY -c \"from faster_whisper import WhisperModel as W; m=W('$CACHE/models/$m', device='cpu', compute_type='$1', cpu_threads=2); print(''.join(s.text for s in m.transcribe('$JFK', beam_size=1, temperature=0.0, condition_on_previous_text=False)[0]))\""; }
  st() { echo "$1 transcribe -m $m --beam-size 1 --temperature 0 --threads 2 --device cpu --lane $2 $JFK"; }
  # STAPES_BASE: an earlier build, timed in the same run (before/after of a change).
  base=()
  if [ -n "${STAPES_BASE:-}" ]; then
    base=(-n "stapes-base f32" "$(st "$STAPES_BASE" f32)" -n "stapes-base q8" "$(st "$STAPES_BASE" q8)")
  fi
  hyperfine -N --warmup 1 --runs "${RUNS:-5}" --export-json "$OUT/$m.json" \
    -n "stapes f32" "$(st "$STAPES" f32)" \
    -n "stapes q8" "$(st "$STAPES" q8)" \
    "${base[@]}" \
    -n "faster-whisper float32" "$(fw float32)" \
    -n "faster-whisper int8" "$(fw int8)" \
    -n "whisper.cpp" "$WCPP -m $ggml -f $JFK -t 2 -bs 1 -bo 1 -np"
done
