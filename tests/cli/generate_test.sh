#!/usr/bin/env bash
# GPT models through the command line: a trained gpt-tiny checkpoint generates text, the same
# command printing the same text on every rerun and thread count; any GPT configuration trains on
# any text file, and its checkpoint evaluates and generates; bad models, data, prompts and
# sampling settings are errors naming the cause.
source "$(dirname "$0")/common.sh"
export LC_ALL=C  # ${#text} counts bytes
has() { grep -qF -- "$2" <<< "$1" || fail "$3: no '$2' in: $1"; }

out=$("$synoros" train --model gpt-tiny --steps 3 --batch 4 --sample 0 --no-progress --out "$dir/lm" 2>&1) ||
  fail "train gpt-tiny: $out"
ck="$dir/lm/checkpoint.safetensors"
# Activation checkpointing recomputes the blocks' activations in the backward pass: the same bytes.
out=$("$synoros" train --model gpt-tiny --steps 3 --batch 4 --sample 0 --no-progress --checkpoint-activations \
  --out "$dir/lm-recompute" 2>&1) || fail "train gpt-tiny --checkpoint-activations: $out"
cmp -s "$ck" "$dir/lm-recompute/checkpoint.safetensors" ||
  fail "--checkpoint-activations changed the checkpoint's bytes"
# ... and the plan keeps less; `memory --largest N` lists the values alive at the plan's peak.
plain=$("$synoros" memory --model gpt-tiny --batch 16 --largest 3 2>&1) || fail "memory --largest: $plain"
less=$("$synoros" memory --model gpt-tiny --batch 16 --checkpoint-activations 2>&1) ||
  fail "memory --checkpoint-activations: $less"
bytes() { sed -n 's/.*"planned_bytes": \([0-9]*\).*/\1/p' <<< "$1" | head -1; }
[ "$(bytes "$less")" -lt "$(bytes "$plain")" ] || fail "checkpointing did not shrink the plan: $less / $plain"
has "$plain" "bytes live in" "memory --largest's peak line"
[ "$(grep -c 'bytes, launches' <<< "$plain")" -eq 3 ] || fail "memory --largest 3 listed: $plain"
gen=(generate --model "$ck" --prompt "The " --tokens 40 --top-k 0)
a=$("$synoros" "${gen[@]}" --seed 5 --threads 1 2>"$dir/err1") || fail "generate from a checkpoint: $a $(cat "$dir/err1")"
b=$("$synoros" "${gen[@]}" --seed 5 --threads 2 2>"$dir/err2") || fail "generate at 2 threads: $b"
[ "$a" == "$b" ] || fail "1 and 2 threads generated different text: '$a' / '$b'"
[ "${#a}" -ge 44 ] || fail "expected the prompt and 40 bytes, got '$a'"
has "$(cat "$dir/err1")" "decode: 38 tokens in" "the decode rate"
has "$(cat "$dir/err1")" "vocab 256, context 64, width 128, heads 4, layers 2" "the model line"
c=$("$synoros" "${gen[@]}" --seed 6 2>/dev/null) || fail "generate with another seed"
[ "$a" != "$c" ] || fail "seeds 5 and 6 sampled the same 40 bytes"
g1=$("$synoros" generate --model gpt-tiny --temperature 0 --tokens 80 --batch 3 2>/dev/null) || fail "greedy batch 3"
g2=$("$synoros" generate --model gpt-tiny --temperature 0 --tokens 80 --batch 3 2>/dev/null)
[ "$g1" == "$g2" ] || fail "greedy generation differs between reruns"
[ "$(grep -c -- '--- row' <<< "$g1")" -eq 2 ] || fail "batch 3 printed $(grep -c -- '--- row' <<< "$g1") extra rows"

# Any text file trains any GPT configuration (shrunk here), and its checkpoint evaluates and generates.
for i in $(seq 200); do echo "line $i of a small text file for the language-model trainer"; done > "$dir/text.txt"
small=(--model gpt2-11m --data "$dir/text.txt" --context 32 --width 64 --layers 1 --heads 2 --batch 2)
out=$("$synoros" train "${small[@]}" --steps 4 --eval-every 2 --sample 8 --no-progress --out "$dir/t" 2>&1) ||
  fail "train gpt2-11m on a text file: $out"
has "$out" "gpt2-11m: " "the parameter line"
out=$("$synoros" eval --checkpoint "$dir/t/checkpoint.safetensors" --sample 8 2>&1) || fail "eval: $out"
has "$out" "validation loss" "eval of a text-file checkpoint"
out=$("$synoros" generate --model "$dir/t/checkpoint.safetensors" --tokens 8 2>&1) || fail "generate: $out"
has "$out" "context 32, width 64, heads 2, layers 1" "generate from a text-file checkpoint"

# LoRA fine-tuning of the text-file checkpoint: PEFT's adapter directory, the same bytes on a
# rerun, the adapters generating as they do merged, the checkpoint evaluating.
ft=(finetune --base "$dir/t/checkpoint.safetensors" --data "$dir/text.txt" --lora-rank 4 --sequence 16 --batch 2
    --accum 2 --steps 4 --eval-every 2 --sample 8 --no-progress)
out=$("$synoros" "${ft[@]}" --merge --out "$dir/ft1" 2>&1) || fail "finetune: $out"
has "$out" "LoRA parameters (rank 4, alpha 8, c_attn,c_proj,c_fc)" "the adapter line"
for f in adapter/adapter_model.safetensors adapter/adapter_config.json merged.safetensors checkpoint.safetensors; do
  [ -s "$dir/ft1/$f" ] || fail "finetune wrote no $f"
done
out=$("$synoros" "${ft[@]}" --threads 1 --out "$dir/ft2" 2>&1) || fail "finetune rerun: $out"
cmp -s "$dir/ft1/adapter/adapter_model.safetensors" "$dir/ft2/adapter/adapter_model.safetensors" ||
  fail "a rerun of finetune wrote other adapter bytes"
l=$("$synoros" generate --model "$dir/t/checkpoint.safetensors" --lora "$dir/ft1/adapter" --tokens 30 --seed 3 2>"$dir/err3") ||
  fail "generate with --lora: $l $(cat "$dir/err3")"
has "$(cat "$dir/err3")" "adapter parameters from" "the LoRA line"
m=$("$synoros" generate --model "$dir/ft1/merged.safetensors" --tokens 30 --seed 3 2>/dev/null) || fail "generate merged"
[ "$l" == "$m" ] || fail "the adapters merged on load and the merged file generated different text: '$l' / '$m'"
out=$("$synoros" eval --checkpoint "$dir/ft1/checkpoint.safetensors" --sample 8 2>&1) || fail "eval of a finetune: $out"
has "$out" "validation loss" "eval of a finetune checkpoint"

expect_error() {  # expect_error FRAGMENT ARGS...
  local fragment=$1; shift
  out=$("$synoros" "$@" 2>&1)
  local rc=$?
  [ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "'$*' exited with $rc: $out"
  has "$out" "$fragment" "$*"
}
expect_error "neither a file nor a configuration" generate --model no-such-model
expect_error "the context holds 64" generate --prompt "$(printf '%070d' 0)"
expect_error "temperature" generate --temperature -1
expect_error "top-p" generate --top-p 0
printf 'not a safetensors file' > "$dir/bad.safetensors"
expect_error "$dir/bad.safetensors" generate --model "$dir/bad.safetensors"

expect_error "is fortunes or a text file" train --model gpt2-11m --data "$dir/missing.txt"
printf 'short' > "$dir/short.txt"
expect_error "short.txt" train --model gpt2-11m --data "$dir/short.txt" --context 32 --width 64 --layers 1 --heads 2 \
  --steps 1 --no-progress --out "$dir/s"

expect_error "--base PATH (the model to adapt) is required" finetune --lora-rank 4
expect_error "--lora-alpha needs --lora-rank > 0" finetune --base "$ck" --lora-rank 0 --lora-alpha 3
expect_error "--merge needs --lora-rank > 0" finetune --base "$ck" --lora-rank 0 --merge
expect_error "records 2 attention heads, not the 4" generate --model "$dir/t/checkpoint.safetensors" --heads 4
expect_error "target 'q_proj' matches no projection" finetune --base "$ck" --lora-targets q_proj --steps 1 \
  --no-progress --out "$dir/bad-ft"
expect_error "a LoRA fine-tuning checkpoint" generate --model "$dir/ft1/checkpoint.safetensors"
expect_error "has no adapters" generate --model "$ck" --lora "$dir/missing"

exit $((failures > 0))
