#!/usr/bin/env bash
# Stop 13 call 4a: first half of the real base weights, and whisper.cpp's build started in its own session.
set -uo pipefail
mkdir -p /tmp/parts /tmp/w && cp dist/bx/basepart.aa /tmp/parts/ && tar -xJf dist/bx/wcpp.tar.xz -C /tmp/w
cd /tmp/w/wcpp && setsid nohup bash -c 'cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/w/cfg.log 2>&1 && cmake --build build -j 16 --target whisper-cli > /tmp/w/build.log 2>&1; echo "wcpp build rc=$? at $(date -u +%T)" > /tmp/w/done' > /dev/null 2>&1 < /dev/null &
sleep 2; date -u; ls -la /tmp/parts
