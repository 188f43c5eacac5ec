#!/usr/bin/env bash
# `synoros latency`: a searched operator's network against the convolutional one, four interleaved
# pairs (batch 64 and 1, one and two threads) printed and written as JSON; bad input is an error.
set -euo pipefail
synoros=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The depthwise 3x3 operator of the headline search, in the first two layer classes.
dw="5 0,-1,-1,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0,0 0,-1,-1,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0,0 1,-1,-1,50,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 6,1,2,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 6,3,2,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0"
"$synoros" latency --operator "$dw" --mask 3 --rounds 2 --repeats 1 --json "$dir/lat.json" > "$dir/out.txt"
cat "$dir/out.txt"
[ "$(grep -cE '^(64|1) +[12] ' "$dir/out.txt")" -eq 4 ] || { echo "expected four rows"; exit 1; }
python3 - "$dir/lat.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert sorted((r["batch"], r["threads"]) for r in rows) == [(1, 1), (1, 2), (64, 1), (64, 2)], rows
for r in rows:
    assert len(r["speedups"]) == 2 and len(r["baseline_ms"]) == 2, r
    for b, c, s in zip(r["baseline_ms"], r["operator_ms"], r["speedups"]):
        assert b > 0 and c > 0 and abs(s - b / c) < 1e-3 * s, r
PY
if "$synoros" latency --mask 3 2> "$dir/err.txt"; then echo "no operator accepted"; exit 1; fi
grep -q "operator ACTIONS is required" "$dir/err.txt"
if "$synoros" latency --operator "2 not,an,action" 2> "$dir/err.txt"; then echo "bad path accepted"; exit 1; fi
grep -q "corrupt action" "$dir/err.txt"
echo ok
