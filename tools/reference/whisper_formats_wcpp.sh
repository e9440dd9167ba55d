#!/usr/bin/env bash
# Checks that whisper.cpp's own loader accepts the ggml files `stapes convert` writes: builds
# whisper-cli (CPU) from a whisper.cpp source tree, converts the CTranslate2 tiny.en and base
# checkpoints to ggml (f16, and q8_0 for tiny.en), and transcribes jfk.wav with each.
#   tools/reference/whisper_formats_wcpp.sh WHISPER_CPP_SRC [BUILD_DIR]
# BUILD_DIR defaults to ./wcpp-build (keep it out of git). Needs cmake and a C++ compiler.
set -euo pipefail
SRC=${1:?whisper.cpp source directory}
BUILD=${2:-wcpp-build}
CACHE="${STAPES_CACHE:-$HOME/.cache/stapes}"
JFK="$(dirname "$0")/../../samples/jfk.wav"
[ -f "$JFK" ] || JFK="$CACHE/audio/jfk.wav"
WANT="ask not what your country can do for you, ask what you can do for your country"

cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DWHISPER_BUILD_TESTS=OFF \
  -DWHISPER_BUILD_SERVER=OFF -DWHISPER_SDL2=OFF -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target whisper-cli >/dev/null
cargo build --release -q -p stapes-models --example whisper_convert
tmp=$(mktemp -d)
fail=0
for spec in "tiny.en f16" "base f16" "tiny.en q8_0"; do
  set -- $spec
  out="$tmp/ggml-$1-$2.bin"
  target/release/examples/whisper_convert "$CACHE/models/whisper-$1" "$out" ggml "$2"
  text=$("$BUILD/bin/whisper-cli" -m "$out" -f "$JFK" -nt -t 2 2>/dev/null | tr -s ' ')
  if grep -q "$WANT" <<<"$text"; then echo "ok   $1 $2:$text"; else echo "FAIL $1 $2:$text"; fail=1; fi
done
rm -rf "$tmp"
exit $fail
