#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds and runs an outside project that
# finds it with find_package(Synoros): the headers, the library, the tool and the package config
# must all be there, and the quick start must train (its loss falls).
set -euo pipefail
build=$1 source=$2 cxx=$3 type=${4:-Release}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmake --install "$build" --prefix "$dir/prefix" > "$dir/install.log"
for f in include/synoros/synoros.hpp include/synoros/config.hpp bin/synoros lib/cmake/Synoros/SynorosConfig.cmake; do
  [ -e "$dir/prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
ls "$dir"/prefix/lib*/libsynoros.a > /dev/null
cmake -S "$source/tests/install" -B "$dir/build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$type" \
  -DCMAKE_PREFIX_PATH="$dir/prefix" > "$dir/configure.log" || { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir/build" > "$dir/build.log" || { cat "$dir/build.log"; exit 1; }
"$dir/build/quickstart" | tee "$dir/run.log"
first=$(awk '/^step 0 /{print $4}' "$dir/run.log")
last=$(awk '/^step 75 /{print $4}' "$dir/run.log")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || { echo "the quick start's loss did not fall"; exit 1; }
"$dir/prefix/bin/synoros" info
echo ok
