#!/usr/bin/env bash
# Installs, builds with warnings as errors, runs every test; builds and installs the Python
# package with pip into a fresh virtual environment and runs its tests; then runs the suite once
# more under AddressSanitizer + UndefinedBehaviorSanitizer (all but its five longest tests).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYNOROS_WERROR=ON > /dev/null
cmake --build build
ctest --test-dir build --output-on-failure -j "$jobs"
# The Python package, exactly as a user installs it (scikit-build-core and nanobind come from
# PyPI); the environment sees Debian's NumPy and PyTorch, which the parity tests compare against.
rm -rf build/venv
/usr/bin/python3 -m venv --system-site-packages build/venv
build/venv/bin/pip install -q ".[test]"
(cd build && venv/bin/python -m pytest -q ../python/tests)
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSYNOROS_WERROR=ON \
      -DSYNOROS_SANITIZE=ON -DSYNOROS_BENCH=OFF > /dev/null
cmake --build build-asan
# The sanitizers slow the searches tenfold: the five longest tests (the MPI training across rank
# counts and four whole searches, a fifth of this pass's time) ran above, and their code runs
# under the sanitizers in the shorter synthesis, search and MPI tests.
long_tests='^(Cli\.MpiTrainSameBytesForEveryRankCount|SynthSearch\.KilledSearchResumesWhereItStopped|SynthReach\.ConvPointwiseGroupedLowRankDepthwise|SynthSearch\.MctsIsDeterministicUnderASeedAndFindsGoodOperators|SynthKnown\.TheSearchFindsThemAndTheyAreNamed)$'
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -E "$long_tests"
# The benchmark binary and the CLI must at least start and run.
./build/synoros_bench --benchmark_min_time=0.01 > /dev/null
./build/synoros train-mlp --steps 50 > /dev/null
# A checkpoint written by train must evaluate through eval (the README's commands).
tmp=$(mktemp -d)
./build/synoros train --model mlp --steps 5 --train-limit 256 --test-limit 256 --no-progress --out "$tmp" \
  --save "$tmp/mlp.safetensors" > /dev/null
./build/synoros eval --model mlp --checkpoint "$tmp/mlp.safetensors" --test-limit 256 | grep -q "test accuracy"
rm -rf "$tmp"
