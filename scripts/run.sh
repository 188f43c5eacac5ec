#!/usr/bin/env bash
# The main job: install, build, train the tiny MLP, and print the side-by-side benchmark table.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build
./build/synoros train-mlp --steps 500
/usr/bin/python3 bench/compare.py --threads 1 2 --json build/bench_results.json
