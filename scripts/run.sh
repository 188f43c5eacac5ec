#!/usr/bin/env bash
# The main job: install, build, run a short operator search on Fashion-MNIST with the small
# ResNet (proxy training and measured latency; report in build/trials-report), then print the
# side-by-side benchmark table against PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build
./build/synoros trials --enumerate --depth 5 --screen 24 --candidates 3 --rounds 1 --train-images 4096 \
  --test-images 2000 --workers 2 --report build/trials-report
/usr/bin/python3 bench/compare.py --threads 1 2 --mode default,fast --json build/bench_results.json
