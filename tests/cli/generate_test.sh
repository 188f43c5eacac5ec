#!/usr/bin/env bash
# `synoros generate`: a trained gpt-tiny checkpoint and a file written in Hugging Face's layout
# generate text; the same command prints the same text on every rerun and thread count; bad
# models, prompts and sampling settings are errors naming the cause.
source "$(dirname "$0")/common.sh"
export LC_ALL=C  # ${#text} counts bytes
has() { grep -qF -- "$2" <<< "$1" || fail "$3: no '$2' in: $1"; }

out=$("$synoros" train --model gpt-tiny --steps 3 --batch 4 --sample 0 --no-progress --out "$dir/lm" 2>&1) ||
  fail "train gpt-tiny: $out"
ck="$dir/lm/checkpoint.safetensors"
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

exit $((failures > 0))
