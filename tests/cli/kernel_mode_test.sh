#!/usr/bin/env bash
# The two kernel modes through the command line: default mode writes no kernel record; fast mode
# records its kernel choices in the checkpoint and the run directory, eval adopts the
# checkpoint's mode, a rerun into the same --out replays the record, a resume in the other mode
# is refused, and plan/profile/info say which mode and which launches round differently.
source "$(dirname "$0")/common.sh"
has() { grep -qF -- "$2" <<< "$1" || fail "$3: no '$2' in: $1"; }
small=(--model mlp --steps 4 --batch 32 --train-limit 256 --test-limit 128 --no-progress)

out=$("$synoros" train "${small[@]}" --out "$dir/default" 2>&1) || fail "default-mode train: $out"
[ ! -e "$dir/default/kernel_choices.txt" ] || fail "default mode wrote a kernel record"

out=$("$synoros" train "${small[@]}" --fast --out "$dir/fast" 2>&1) || fail "fast-mode train: $out"
[ -s "$dir/fast/kernel_choices.txt" ] || fail "fast mode wrote no kernel record in the run directory"
awk -F'\t' 'NF != 3 { bad = 1 } END { exit bad }' "$dir/fast/kernel_choices.txt" ||
  fail "the kernel record's lines are not key<TAB>kernel<TAB>version"

out=$("$synoros" eval --checkpoint "$dir/fast/checkpoint.safetensors" 2>&1) || fail "eval: $out"
has "$out" "evaluating with the kernels it recorded" "eval of a fast-mode checkpoint"
out=$("$synoros" eval --checkpoint "$dir/default/checkpoint.safetensors" 2>&1) || fail "eval: $out"
grep -qF "fast mode" <<< "$out" && fail "eval of a default-mode checkpoint switched to fast mode: $out"

out=$("$synoros" train "${small[@]}" --fast --out "$dir/fast" 2>&1) || fail "fast-mode rerun: $out"
has "$out" "replaying the kernel choices in $dir/fast/kernel_choices.txt" "rerun into the same --out"

out=$("$synoros" train "${small[@]}" --out "$dir/fast" --resume "$dir/fast/checkpoint.safetensors" 2>&1)
[ $? -eq 1 ] || fail "a default-mode resume of a fast-mode checkpoint was not refused: $out"
has "$out" "kernels = fast, this command has default" "resume across modes"
out=$("$synoros" train "${small[@]}" --fast --out "$dir/fast" --resume "$dir/fast/checkpoint.safetensors" 2>&1) ||
  fail "fast-mode resume: $out"

printf 'only one field\n' > "$dir/fast/kernel_choices.txt"
out=$("$synoros" train "${small[@]}" --fast --out "$dir/fast" 2>&1)
[ $? -eq 1 ] || fail "a damaged kernel record was not refused: $out"
has "$out" "kernel_choices.txt': kernel choice 1 is not" "damaged record"

out=$("$synoros" plan 2>&1) || fail "plan: $out"
has "$out" "canonical kernels" "plan in default mode"
out=$("$synoros" plan --fast 2>&1) || fail "plan --fast: $out"
has "$out" "fast mode" "plan --fast"
out=$(SYNOROS_FAST=1 "$synoros" info 2>&1) || fail "info: $out"
has "$out" "fast mode" "info with SYNOROS_FAST=1"
out=$("$synoros" profile --model mlp --iterations 2 2>&1) || fail "profile: $out"
has "$out" "order" "profile's header"
grep -qE ' fast$' <<< "$out" && fail "a default-mode profile lists a fast-mode launch: $out"

# Selection certificates: every choice measured anew in a tuning cache of the command's own (the
# user's is left as it was), written as JSON whose candidates passed within their bounds.
export SYNOROS_TUNING_CACHE="$dir/tuning.txt"
"$synoros" profile --model mlp --iterations 2 > /dev/null 2>&1 || fail "profile into $SYNOROS_TUNING_CACHE"
before=$(cksum < "$SYNOROS_TUNING_CACHE")
out=$("$synoros" profile --model lenet --fast --iterations 2 --certificates "$dir/certificates.json" 2>&1) ||
  fail "profile --certificates: $out"
has "$out" "predicted/measured median" "the model's calibration"
[ "$(cksum < "$SYNOROS_TUNING_CACHE")" = "$before" ] || fail "profile --certificates changed the user's tuning cache"
python3 - "$dir/certificates.json" <<'PY' || fail "the certificates file"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["calibration"]["launches"]["count"] > 0, c["calibration"]
measured = [s for l in c["launches"] for s in l["selections"] if s["source"] == "measured"]
assert any(len([r for r in s["candidates"] if r["ns"] > 0]) >= 2 for s in measured), "no choice timed two candidates"
assert any(s["key"].startswith("conv2d") for s in measured), "no convolution choice in fast mode"
for s in measured:
    for r in s["candidates"]:
        if r["passed"]:
            assert r["error_of_bound"] <= 1, r
        elif r["checked"]:
            assert r["why"], r
PY
unset SYNOROS_TUNING_CACHE

[ "$failures" -eq 0 ] && echo "all kernel-mode cases passed"
exit $((failures > 0))
