# Sourced by the command-line tests: $1 is the synoros binary; a scratch directory (removed at
# exit) that also holds the tuning cache; fail() counts failures for the exit status.
set -uo pipefail
synoros=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export SYNOROS_TUNING_CACHE="$dir/tuning.txt"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
