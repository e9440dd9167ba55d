#!/usr/bin/env bash
# Build the CUDA home's test and bench executables here (the GPU machine has no Rust) and copy
# them into dist/stapes-cuda/ for the device run (`carry: ["dist"]`, then gpu/run.sh there).
set -euo pipefail
cd "$(dirname "$0")/../../.."
mkdir -p dist/stapes-cuda
cargo build --release -p stapes-cuda --example cuda_bench
cargo test --release -p stapes-cuda --no-run --message-format=json 2>/dev/null |
    tools/bench/copy_test_bins.py dist/stapes-cuda
cp target/release/examples/cuda_bench dist/stapes-cuda/cuda_bench
