#!/usr/bin/env bash
# Pack bundles from stage_device.sh into one solid xz for the GPU machine: dist/PACK/all.tar.xz
# with a folder a bundle, as each dist/NAME.tar.xz holds it. Bundles of one stop differ mostly
# in their kernel strings, so eight pack into ~10 MB where separately they take ~55 MB, past
# run's 64 MiB carry beside the tracked tree. Carry dist/PACK and source device_env.sh with
# PACK=dist/PACK/all.tar.xz: it unpacks every bundle into /tmp/x.
#
#   tools/bench/pack_bundles.sh c50 vA vE
set -euo pipefail
cd "$(dirname "$0")/../.."
pack=${1:?usage: pack_bundles.sh PACK BUNDLE...}
shift
[ $# -gt 0 ] || { echo "pack_bundles: no bundles named" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for v in "$@"; do
  [ -d "dist/$v/b" ] || { echo "pack_bundles: no dist/$v/b (stage it with stage_device.sh)" >&2; exit 2; }
  cp -r "dist/$v/b" "$tmp/$v"
done
mkdir -p "dist/$pack"
tar -C "$tmp" -cf - "$@" | xz -9e --lzma2=dict=256MiB -T1 > "dist/$pack/all.tar.xz"
ls -la "dist/$pack/all.tar.xz"
