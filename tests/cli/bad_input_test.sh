#!/usr/bin/env bash
# Bad invocations and files for every command: each gives the expected exit status (1: failure,
# 2: usage) and a message naming the cause, and none dies by a signal. Then the behaviours that
# used to be silently wrong: flags honoured, history kept on resume, help that does no work.
source "$(dirname "$0")/common.sh"

# expect STATUS FRAGMENT [VAR=VALUE ...] -- ARGS...
expect() {
  local want=$1 fragment=$2
  shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local out rc
  out=$(env "${envs[@]}" timeout 300 "$synoros" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ge 124 ]; then fail "synoros $* died or hung (status $rc): $out"; return; fi
  [ "$rc" -eq "$want" ] || { fail "synoros $*: status $rc, expected $want: $out"; return; }
  grep -qF -- "$fragment" <<< "$out" || fail "synoros $*: no '$fragment' in: $out"
}

small=(--train-limit 256 --test-limit 256 --no-progress)
touch "$dir/a-file"

# Usage mistakes: exit 2, before any work.
expect 2 "unknown command 'nope'" -- nope
expect 2 "unknown option '--lr'" -- eval --checkpoint x --lr 0.1
expect 2 "unknown option '--frobnicate'" -- train --frobnicate
expect 2 "--steps needs a value" -- train --steps
expect 2 "--steps expects an integer, got 'ten'" -- train --steps ten
expect 2 "--threads 100000 is out of range (1 to 1024)" -- train --threads 100000
expect 2 "--momentum must be a finite number, got 'nan'" -- train --momentum nan
expect 2 "--lr must be a finite number, got 'inf'" -- train --lr inf
expect 2 "--epochs 99999999999999999999 is out of range" -- train --epochs 99999999999999999999
expect 2 "--epochs does not apply to gpt-tiny" -- train --model gpt-tiny --epochs 3
expect 2 "--accum does not apply to resnet-mini" -- train --accum 2
expect 2 "--shards does not apply to gpt-tiny" -- train --model gpt-tiny --shards 2
expect 1 "5 micro-shards do not divide the batch of 64" -- train --model mlp --shards 5 --train-limit 128 --test-limit 10 --out "$dir/shards"
expect 2 "gpt2-7b" -- memory --model gpt2-7b
expect 2 "--clip applies with --optimizer" -- memory --clip 1
expect 2 "--context does not apply to mlp" -- train --model mlp --context 32
expect 2 "give --epochs or --steps, not both" -- train --model mlp --epochs 1 --steps 3
expect 2 "--momentum applies to sgd only" -- train --model mlp --optimizer adamw --momentum 0.5
expect 2 "--model 'vgg' is not one of" -- train --model vgg
expect 2 "is fortunes or a text file" -- train --model gpt-tiny --data fashion-mnist
expect 2 "--heads 3 does not divide --width 128" -- train --model gpt-tiny --heads 3
expect 2 "--mask goes with --operator" -- train --model resnet-mini --mask 3
expect 2 "--steps is given twice" -- train-mlp --steps 3 --steps 4
expect 2 "--checkpoint PATH is required" -- eval
expect 2 "--iterations 0 is out of range" -- profile --iterations 0
expect 2 "--raw applies to --mode enumerate" -- synth --conv2d --mode mcts --raw
expect 2 "give exactly one spec" -- synth --conv2d --conv2d-same
expect 2 "--width applies to --mode beam" -- synth --conv2d --width 3
expect 2 "unexpected argument 'stray'" -- info stray
expect 2 "--reward applies to --mode mcts" -- synth --conv2d --reward hash
expect 2 "--export applies to the modes that print operators" -- synth --conv2d --mode gaps --export "$dir"
expect 2 "--reward applies to --mode mcts" -- synth --conv2d --mode gaps --reward hash
expect 1 "cap names unknown variable 'Q'" -- synth --conv2d --caps "Q=1"
expect 1 "cap of 'k' must be in [0, 8]" -- synth --conv2d --caps "k=9"
expect 1 "'N' is passed through untouched" -- synth --conv2d --caps "N=1"
expect 2 "--min-weights 3 exceeds --max-weights 2" -- synth --conv2d --min-weights 3
expect 2 "--operator ACTIONS is required" -- export

# Failures: exit 1 with the cause.
expect 1 "run directory '$dir/a-file/x' cannot be created" -- train --model mlp --out "$dir/a-file/x" "${small[@]}"
expect 1 "SYNOROS_NUM_THREADS='100000' is not valid" SYNOROS_NUM_THREADS=100000 -- info
expect 1 "SYNOROS_ISA='avx3' is not valid: expected scalar|avx2|avx512" SYNOROS_ISA=avx3 -- info
expect 1 "SYNOROS_MAX_PLAN_BYTES='lots' is not valid" SYNOROS_MAX_PLAN_BYTES=lots -- info
expect 1 "SYNOROS_STRICT='yes' is not valid: expected 0|1" SYNOROS_STRICT=yes -- plan
expect 2 "--width 100000000 is out of range" -- train --model gpt-tiny --width 100000000
expect 1 "out of memory" SYNOROS_MAX_MEMORY_BYTES=1G -- train --model gpt-tiny --width 60000 --heads 1 --steps 1 --no-progress --out "$dir/w/x/y"
# A command that stops early leaves no empty run directory behind, and keeps what was there.
[ ! -e "$dir/w" ] || fail "the failed run left $(find "$dir/w")"
mkdir -p "$dir/kept/empty"
expect 1 "out of memory" SYNOROS_MAX_MEMORY_BYTES=1G -- train --model gpt-tiny --width 60000 --heads 1 --steps 1 --no-progress --out "$dir/kept/empty/run"
[ -d "$dir/kept/empty" ] && [ ! -e "$dir/kept/empty/run" ] || fail "the failed run removed a directory it did not make, or kept its own"
expect 1 "out of memory" SYNOROS_MAX_MEMORY_BYTES=1G -- train --model gpt-tiny --width 60000 --heads 1 --steps 1 --no-progress --out "$dir/kept/empty/"
[ -d "$dir/kept/empty" ] || fail "the failed run removed the empty --out directory it was given"
expect 1 "out of memory" SYNOROS_MAX_MEMORY_BYTES=1G -- train --model gpt-tiny --width 60000 --heads 1 --steps 1 --no-progress --out "$dir/w2/x/"
[ ! -e "$dir/w2" ] || fail "the failed run left $(find "$dir/w2") (a trailing slash)"
expect 1 "cannot open" -- eval --checkpoint "$dir/absent.safetensors"
expect 1 "cannot read spec file" -- synth --spec-file "$dir/absent.txt"

# A checkpoint to resume and evaluate, and damaged copies of its metadata.
run="$dir/run"
expect 0 "checkpoint $run/checkpoint.safetensors" -- train --model mlp --epochs 2 "${small[@]}" --out "$run"
ck="$run/checkpoint.safetensors"
[ "$(grep -c . "$run/log.csv")" -eq 3 ] || fail "two epochs should log two rows: $(cat "$run/log.csv")"
# eval reads model and optimizer from the checkpoint; --data-dir is honoured.
expect 0 "mlp at step 8" -- eval --checkpoint "$ck" --test-limit 256
expect 1 "holds a model of kind mlp, not lenet" -- eval --checkpoint "$ck" --model lenet
expect 1 "$dir/no-data" -- eval --checkpoint "$ck" --data-dir "$dir/no-data"
expect 2 "--sample does not apply to mlp" -- eval --checkpoint "$ck" --sample 5
expect 2 "--operator is recorded in the checkpoint" -- eval --checkpoint "$ck" --operator "1 x"
# Evaluation reads the test split alone: a directory with only the test files serves.
data_dir=${SYNOROS_DATA_DIR:-/usr/share/datasets/fashion-mnist}
mkdir -p "$dir/test-only"
ln -s "$data_dir"/t10k-* "$dir/test-only/"
expect 0 "mlp at step 8" -- eval --checkpoint "$ck" --test-limit 5 --data-dir "$dir/test-only"
# Resume refuses another configuration, naming the field.
expect 1 "batch = 64, this command has 32" -- train --model mlp --epochs 2 "${small[@]}" --out "$run" --resume "$ck" --batch 32
expect 1 "seed = 1, this command has 2" -- train --model mlp --epochs 2 "${small[@]}" --out "$run" --resume "$ck" --seed 2
expect 1 "total_steps = 8, this command has 12" -- train --model mlp --epochs 3 "${small[@]}" --out "$run" --resume "$ck"
# Metadata a user (or a tool) wrote wrong.
rewrite() {  # rewrite SRC DST KEY VALUE: a copy of a safetensors file with one metadata value changed
  python3 - "$@" <<'PY'
import json, struct, sys
src, dst, key, value = sys.argv[1:]
raw = open(src, 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
head = json.loads(raw[8:8 + n])
head['__metadata__'][key] = value
text = json.dumps(head).encode()
text += b' ' * ((8 - len(text) % 8) % 8)
open(dst, 'wb').write(struct.pack('<Q', len(text)) + text + raw[8 + n:])
PY
}
for v in abc 99999999999999999999 -5 3.5; do
  rewrite "$ck" "$dir/bad.safetensors" step "$v"
  expect 1 "metadata 'step' is '$v'" -- eval --checkpoint "$dir/bad.safetensors"
  expect 1 "metadata 'step' is '$v'" -- train --model mlp --epochs 2 "${small[@]}" --out "$dir/r" --resume "$dir/bad.safetensors"
done

# gpt-tiny's shape travels in its checkpoint: eval needs no flags for it.
lm=(--model gpt-tiny --steps 2 --eval-every 2 --width 32 --heads 2 --layers 1 --context 16 --batch 4 --sample 4 --no-progress)
expect 0 "sample" -- train "${lm[@]}" --out "$dir/lm"
expect 0 "validation loss" -- eval --checkpoint "$dir/lm/checkpoint.safetensors" --sample 4
expect 2 "--test-limit does not apply to gpt-tiny" -- eval --checkpoint "$dir/lm/checkpoint.safetensors" --test-limit 5
expect 2 "--width is recorded in the checkpoint" -- eval --checkpoint "$dir/lm/checkpoint.safetensors" --width 32
# An option's value is never taken for a flag: "-h" here is a prompt, not a request for help; and
# an empty prompt is a prompt.
expect 0 "validation loss" -- eval --checkpoint "$dir/lm/checkpoint.safetensors" --prompt -h --sample 2
expect 0 "validation loss" -- eval --checkpoint "$dir/lm/checkpoint.safetensors" --prompt "" --sample 2
expect 1 "width = 32, this command has 64" -- train "${lm[@]/#32/64}" --out "$dir/lm" --resume "$dir/lm/checkpoint.safetensors"

# Resume keeps the history: a checkpoint rewound to step 4 continues into the same run
# directory, keeps the first epoch's row and appends the second.
first=$(sed -n 2p "$run/log.csv")
rewrite "$ck" "$dir/at4.safetensors" step 4
expect 0 "resumed from" -- train --model mlp --epochs 2 "${small[@]}" --out "$run" --resume "$dir/at4.safetensors"
[ "$(grep -c . "$run/log.csv")" -eq 3 ] || fail "the resumed run should keep one row and add one: $(cat "$run/log.csv")"
[ "$(sed -n 2p "$run/log.csv")" = "$first" ] || fail "the resumed run rewrote the first epoch's row"
grep -q '"epoch":1,' "$run/log.json" || fail "log.json lost the first epoch"
grep -q "<polyline" "$run/curves.svg" || fail "two epochs should draw lines"

# --steps is honoured by the classifiers; a one-epoch run draws markers, not a blank chart.
expect 0 "3 steps" -- train --model mlp --steps 3 "${small[@]}" --out "$dir/s3"
grep -q "^1,3," "$dir/s3/log.csv" || fail "--steps 3 should end at step 3: $(cat "$dir/s3/log.csv")"
grep -q "<circle" "$dir/s3/curves.svg" || fail "a one-point curve should draw a marker"

# A stale temporary of a killed save is removed by the next save.
dead=4194000
while [ -e "/proc/$dead" ]; do dead=$((dead + 1)); done
echo partial > "$dir/s3/checkpoint.safetensors.tmp.$dead"
expect 0 "3 steps" -- train --model mlp --steps 3 "${small[@]}" --out "$dir/s3"
[ ! -e "$dir/s3/checkpoint.safetensors.tmp.$dead" ] || fail "a stale temporary was left behind"

# Ranges name both ends; a diverging demo says so; a searched operator's mask names only the
# network's layer classes; a malformed action path says what an action path is.
expect 2 "--seed 9223372036854775808 is out of range (0 to 9223372036854775807)" -- generate --model gpt-tiny --seed 9223372036854775808
expect 1 "the loss became" -- train-mlp --steps 5 --lr 100 --threads 1
# The step a loss turns non-finite is counted as the progress lines count them, from 1.
# (SGD at lr 100: the loss of the fifth step is the first NaN; the progress lines print steps 1 to 4.)
expect 1 "nan at step 5 of 100 (lower the learning rate or clip" -- train --model mlp --lr 100 --train-limit 640 --test-limit 64 --no-progress --out "$dir/nan"
dw="5 0,-1,-1,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0,0 0,-1,-1,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0,0 1,-1,-1,50,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 6,1,2,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 6,3,2,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0"
expect 2 "--mask 248 is out of range (1 to 7)" -- latency --operator "$dw" --mask 248 --rounds 1 --repeats 1
expect 2 "--mask 8 is out of range (1 to 7)" -- export --operator "$dw" --mask 8 --out "$dir/export"
expect 1 "--mask 8 names no layer class" -- train --model resnet-mini --operator "$dw" --mask 8 --epochs 1 "${small[@]}" --out "$dir/mask-run"
expect 1 "corrupt action path: it starts with the number of actions" -- export --operator garbage --out "$dir/export"

# A save never replaces what is not a regular file, and writes through a symbolic link.
mkfifo "$dir/pipe"
expect 1 "$dir/pipe: not a regular file (a FIFO)" -- train --model gpt-tiny --steps 1 --threads 1 --no-progress --out "$dir/fifo-run" --save "$dir/pipe"
[ -p "$dir/pipe" ] || fail "the FIFO given as --save was replaced"
expect 1 "--json $dir/pipe: not a regular file" -- latency --operator "$dw" --rounds 1 --repeats 1 --json "$dir/pipe"
expect 0 "trace written to /dev/null" -- profile --model mlp --iterations 2 --trace /dev/null  # written in place
ln -s "$dir/linked.safetensors" "$dir/link.safetensors"
expect 0 "" -- train --model gpt-tiny --steps 1 --threads 1 --no-progress --sample 0 --out "$dir/link-run" --save "$dir/link.safetensors"
[ -L "$dir/link.safetensors" ] || fail "the symbolic link given as --save was replaced"
[ -s "$dir/linked.safetensors" ] || fail "the save did not go through the symbolic link"

# Help: every command has it, it lists the flags the parser reads, and it never does work.
for cmd in $("$synoros" help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1}'); do
  [ "$cmd" = help ] && continue
  expect 0 "usage: synoros $cmd" -- "$cmd" --help
done
expect 0 "--momentum X" -- help train
expect 0 "SYNOROS_MAX_MEMORY_BYTES" -- help env
expect 0 "usage: synoros tune" SYNOROS_TUNING_CACHE="$dir/untouched.txt" -- tune --help
[ ! -e "$dir/untouched.txt" ] || fail "tune --help wrote the tuning cache"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "ok"
