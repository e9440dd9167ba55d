#!/usr/bin/env bash
# Stop 50, call 2: the FastConformer GPU tests call 1 did not run, on feeding_add_norms as it
# lands (vE2 = call 1's vE, the same diff): launches per block, the published shapes against
# CPU f32 with replay == eager, the label loop; fp8 again.
# Stage: tools/bench/stage_device.sh vE2 "cuda_fc_kernels cuda_fc_shapes cuda_label_loop fp8";
#   tools/bench/pack_bundles.sh c50b vE2   (carry dist/c50b)
set -uo pipefail
V=vE2 PACK=dist/c50b/all.tar.xz TEST_LIMIT=240 source tools/bench/device_env.sh
t cuda_fc_kernels; t cuda_fc_shapes; t cuda_label_loop; t fp8
mkdir -p $O/tests; cp /tmp/o/*.log $O/tests/
grep -h "launches per" /tmp/o/cuda_fc_kernels.log
echo "done, elapsed $(el) s"
