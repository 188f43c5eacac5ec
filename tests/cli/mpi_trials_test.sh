#!/usr/bin/env bash
# `mpirun -np 2 synoros trials`: rank 0 proposes and ranks, rank 1 trains every candidate; the records land
# in evaluations.jsonl and a second run resumes from them without training again.
source "$(dirname "$0")/mpi_common.sh"
# The cost-model timer makes the latency screen deterministic: the test's outcome must not depend
# on how busy the machine is.
args=(trials --timer cost-model --enumerate --depth 3 --screen 2 --candidates 1 --rounds 1 --train-images 128 --test-images 64
      --report "$dir/report")
"$mpirun" -np 2 "$synoros" "${args[@]}" > "$dir/first.log" 2>&1 || { cat "$dir/first.log"; exit 1; }
cat "$dir/first.log"
grep -q "MPI: rank 0 proposes and ranks, 1 rank(s) train candidates" "$dir/first.log"
trained=$(grep -c "trained by rank 1 on" "$dir/first.log" || true)
records=$(grep -c '"failed":false' "$dir/report/evaluations.jsonl" || true)
[ "$trained" -eq 2 ] || { echo "expected 2 candidates trained by rank 1, got $trained"; exit 1; }
[ "$records" -eq 2 ] || { echo "expected 2 finished records, got $records"; exit 1; }
# Each candidate is named known (its family) or new in the report.
grep -q "| family |" "$dir/report/report.md" || { echo "the report has no family column"; exit 1; }
grep -q '"family": \["' "$dir/report/report.json" || { echo "the report's JSON names no family"; exit 1; }
# Resuming: the screen's layer times are read back (so the same layer classes are chosen) and
# nothing is trained again.
screened=$(grep -c . "$dir/report/screen.tsv")
[ "$screened" -ge 3 ] || { echo "expected the convolution, the baseline and an operator in screen.tsv"; exit 1; }
"$mpirun" -np 2 "$synoros" "${args[@]}" > "$dir/second.log" 2>&1 || { cat "$dir/second.log"; exit 1; }
grep -q "0 to train" "$dir/second.log" || { cat "$dir/second.log"; echo "the resumed search trained again"; exit 1; }
[ "$(grep -c . "$dir/report/evaluations.jsonl")" -eq 2 ] || { echo "the resumed search added records"; exit 1; }
[ "$(grep -c . "$dir/report/screen.tsv")" -eq "$screened" ] || { echo "the resumed search timed the screen again"; exit 1; }
echo "ok"
