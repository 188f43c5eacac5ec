#!/usr/bin/env bash
# Fuzzes the parsers of user-supplied files and strings with libFuzzer (clang, AddressSanitizer,
# UndefinedBehaviorSanitizer), one target at a time.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS per target (default 600); targets default to all of fuzz/CMakeLists.txt's list. Each
# target starts from a working copy of fuzz/corpus/<target> in build-fuzz/corpus/<target>; new
# inputs that add coverage are merged back into fuzz/corpus/<target> (libFuzzer -merge=1; files
# named seed_* and regress_* are always kept). Crash, leak, timeout and out-of-memory inputs go
# to build-fuzz/artifacts/<target>/, and the script exits non-zero when any target left one.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-600}
shift || true
all_targets=$(sed -n 's/^set(SYNOROS_FUZZ_TARGETS \(.*\))$/\1/p' fuzz/CMakeLists.txt)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && read -r -a targets <<< "$all_targets"
for t in "${targets[@]}"; do
  [[ " $all_targets " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t' (targets: $all_targets)" >&2; exit 2; }
done

# clang and its runtimes (libFuzzer, sanitizers).
scripts/install_deps.sh clang libclang-rt-14-dev

# The library is compiled once with coverage instrumentation (fuzzer-no-link) and the sanitizers,
# and the targets are linked with libFuzzer (fuzz/CMakeLists.txt, SYNOROS_FUZZ=ON). The whole
# library, because several parsers reach far into the engine (an MCTS checkpoint is replayed and
# searched on, evaluation records live with the trainer); static linking then pulls in only the
# objects a target uses.
build=build-fuzz
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
      -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
      -DSYNOROS_FUZZ=ON -DSYNOROS_BENCH=OFF > /dev/null
cmake --build "$build" -j "${FUZZ_JOBS:-1}" --target "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
failed=()
summary=()
for t in "${targets[@]}"; do
  exe=$build/fuzz/fuzz_$t
  work=$build/corpus/$t
  artifacts=$build/artifacts/$t
  log=$build/logs/$t.log
  rm -rf "$artifacts"
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  cp fuzz/corpus/"$t"/* "$work"/ 2> /dev/null || true
  echo "== $t: ${seconds}s (log: $log)"
  start=$(date +%s)
  "$exe" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$work" > "$log" 2>&1 || true
  ran=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)

  # Minimize: keep the named seeds and regression inputs, add whatever else adds coverage. Only
  # edges count (-use_counters=0): hit-count buckets would keep several times as many files.
  merged=$(mktemp -d "$build/merge.XXXXXX")
  find fuzz/corpus/"$t" -maxdepth 1 -type f \( -name 'seed_*' -o -name 'regress_*' \) -exec cp {} "$merged"/ \;
  if "$exe" -merge=1 -use_counters=0 -rss_limit_mb=2048 -timeout=10 "$merged" "$work" fuzz/corpus/"$t" \
    >> "$log" 2>&1; then
    find fuzz/corpus/"$t" -maxdepth 1 -type f -delete
    cp "$merged"/* fuzz/corpus/"$t"/
  else
    echo "fuzz.sh: merging the corpus of $t failed; fuzz/corpus/$t is unchanged" >&2
  fi
  rm -rf "$merged"

  found=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  corpus=$(find fuzz/corpus/"$t" -maxdepth 1 -type f | wc -l)
  summary+=("$(printf '%-14s %6ss %12s execs %5s corpus files %3s artifacts' "$t" "$ran" "${execs:-?}" "$corpus" "$found")")
  [ "$found" -gt 0 ] && failed+=("$t")
done

printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]} (inputs in $build/artifacts/)" >&2
  exit 1
fi
