#!/usr/bin/env bash
# Operator trials on the GPT's projections through the command line, with the deterministic cost
# model: the report, the evaluation log and the front's PyTorch modules are written, and the same
# command gives the same log; a found operator is evaluated alone, trains a GPT from its action
# path, resumes, and a resume with other projections is refused naming the cause.
source "$(dirname "$0")/common.sh"
has() { grep -qF -- "$2" <<< "$1" || fail "$3: no '$2' in: $1"; }

for i in $(seq 1500); do echo "line $((i % 13)) of some text to learn, $((i % 5))"; done > "$dir/text.txt"
small=(lm-trials --timer cost-model --width 16 --heads 2 --layers 1 --context 16 --batch 2 --steps 3 --val-batches 2
  --depth 5 --screen 4 --candidates 2 --threads 1)
run=("${small[@]}" --data "$dir/text.txt")
out=$("$synoros" "${run[@]}" --report "$dir/a" 2>&1) || fail "lm-trials: $out"
has "$out" "baseline: val loss" "lm-trials log"
for f in report.md lm_evaluations.jsonl; do [ -s "$dir/a/$f" ] || fail "lm-trials wrote no $f"; done
ls "$dir/a"/op*_*.py > /dev/null 2>&1 || fail "lm-trials exported no module: $(ls "$dir/a")"
out=$("$synoros" "${run[@]}" --report "$dir/b" 2>&1) || fail "lm-trials again: $out"
strip() { sed 's/"train_seconds":[^,]*,//' "$1"; }
[ "$(strip "$dir/a/lm_evaluations.jsonl")" == "$(strip "$dir/b/lm_evaluations.jsonl")" ] ||
  fail "the same lm-trials command gave another log"

actions=$(sed -n '2s/.*"actions":"\([^"]*\)".*/\1/p' "$dir/a/lm_evaluations.jsonl")
[ -n "$actions" ] || fail "no action path in the log"
# No search: the baseline and the named operator only.
out=$("$synoros" "${run[@]}" --operator "$actions" --mask 5 --report "$dir/c" 2>&1) ||
  fail "lm-trials --operator: $out"
[ "$(wc -l < "$dir/c/lm_evaluations.jsonl")" -eq 2 ] ||
  fail "lm-trials --operator logged: $(cat "$dir/c/lm_evaluations.jsonl")"
grep -qF '"class_mask":5' "$dir/c/lm_evaluations.jsonl" || fail "lm-trials --operator ignored --mask"
train=(train --model gpt-tiny --steps 4 --eval-every 2 --batch 2 --sample 0 --no-progress --data "$dir/text.txt")
out=$("$synoros" "${train[@]}" --operator "$actions" --mask 5 --out "$dir/t" 2>&1) || fail "train --operator: $out"
has "$out" "projections of classes 5" "train --operator"
ck="$dir/t/checkpoint.safetensors"
out=$("$synoros" "${train[@]}" --operator "$actions" --mask 5 --out "$dir/t" --resume "$ck" 2>&1) ||
  fail "resume with the same operator: $out"
out=$("$synoros" "${train[@]}" --out "$dir/t" --resume "$ck" 2>&1) && fail "resume without --operator ran: $out"
has "$out" "resume with the same" "resume without --operator"
out=$("$synoros" "${train[@]}" --operator "$actions" --mask 3 --out "$dir/t" --resume "$ck" 2>&1) &&
  fail "resume with another mask ran: $out"
has "$out" "operator_mask" "resume with another mask"
out=$("$synoros" eval --checkpoint "$ck" --sample 4 2>&1) ||
  fail "eval of a checkpoint with synthesized projections: $out"
has "$out" "validation loss" "eval"
out=$("$synoros" generate --model "$ck" --prompt "a" --tokens 2 2>&1) && fail "generate with synthesized projections ran: $out"
has "$out" "synthesized operator" "generate with synthesized projections"
# Bad files are refused before any work.
out=$("$synoros" "${small[@]}" --data "$dir/none.txt" --report "$dir/d" 2>&1) && fail "lm-trials with no data ran: $out"
has "$out" "cannot read --data" "lm-trials --data missing"
[ ! -e "$dir/d" ] || fail "lm-trials with no data made its report directory"
touch "$dir/file"
out=$("$synoros" "${run[@]}" --report "$dir/file/r" 2>&1) && fail "lm-trials with a bad report directory ran: $out"
has "$out" "--report" "lm-trials --report under a file"
out=$("$synoros" "${train[@]}" --operator "$actions" --mask 16 --out "$dir/t2" 2>&1) && fail "--mask 16 ran: $out"
has "$out" "[1, 15]" "--mask 16"
out=$("$synoros" "${train[@]}" --mask 3 --out "$dir/t2" 2>&1) && fail "--mask without --operator ran: $out"
has "$out" "goes with --operator" "--mask alone"
exit $((failures > 0))
