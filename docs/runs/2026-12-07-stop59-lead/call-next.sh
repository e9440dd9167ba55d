#!/usr/bin/env bash
# Prepared for the next stop (not run in stop 59: no device time was left). PACK =
# dist/c18/all.tar.xz (pack_bundles.sh c18 vM vF): vM = 2fabc29 (stop 56's main, the code of
# stop 55's comparison), vF = f0eaf97 (stop 59's final main code). The question (ledger,
# stop 59): did the FastConformer's single-clip encode slow down in code (stop 55 H100: parakeet q8 one clip
# 1.416 ms; stop 58: 1.467; stop 59: 1.50–1.53) or only across machines? Both bundles on one
# card, alternating, then vF's new tests and the family tests. Carry dist/c18 dist/tools.
set -uo pipefail
PACK=dist/c18/all.tar.xz V=vF source tools/bench/device_env.sh
for r in 1 2 3; do
  for v in vM vF; do e $v parakeet-tdt-0.6b-v2 q8; e $v canary-1b-flash q8; done
  for v in vM vF; do e $v parakeet-tdt-0.6b-v2 q8 16; done
done
for v in vM vF; do e $v parakeet-tdt-0.6b-v2 f16; e $v whisper-large-v3-turbo q8; done
echo "bench done, elapsed $(el) s"
for b in ln_pair conformer_ops fc_subsample cuda_parakeet parakeet_batch cuda_canary; do t $b; done
echo "done, elapsed $(el) s"
