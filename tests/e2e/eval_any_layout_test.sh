#!/usr/bin/env bash
# `loom eval` and `loom generate` of checkpoints trained on several ranks, in one process:
#   - a tp=2, a pp=2 and a dp=2 ZeRO-1 checkpoint (mpirun -np 2) evaluated in one process, with no
#     parallel.* resets given, score the same val loss (relative 1e-6: one process sums in another
#     order) as evaluated in their own layout, and that equals the run's own final val_loss; the
#     data-parallel ranks' micro-batches are scored as one (the same batches, the same tokens);
#   - a layout given on the command line is kept (parallel.tp=2 in one process is refused as
#     before, naming --nproc);
#   - `loom eval runs/<id>` and `loom generate runs/<id>` take the run's final checkpoint (as
#     --resume does: its newest complete one), a stopped run's newest periodic checkpoint, and
#     say so for a run without a complete checkpoint.
. "$(dirname "$0")/../experiments.sh"
make_data || { echo "could not make test data"; exit 1; }
cd "$WORK"
export OMPI_MCA_rmaps_base_oversubscribe=1 ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
S=(data.val_fraction=0.1 training.eval_every=3 training.eval_batches=2 checkpoint.every=3 --quiet)
val() { python3 -c 'import json,sys; print("%.17g" % json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]])' "$1"; }
rel_close() { python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-6 * abs(b))' "$1" "$2"; }
for layout in "tp2 parallel.tp=2" "pp2 parallel.pp=2 training.grad_accum=2 model.layers=2" "dp2 parallel.dp=2 parallel.zero=1"; do
  set -- $layout
  name=$1; shift
  mpirun -np 2 "$LOOM" train base.yaml run.name=$name "$@" "${S[@]}" > /dev/null 2>&1 ||
    { fail "$name: training under mpirun -np 2"; continue; }
  dir=$(ls -d runs/${name}_*)
  run_loss=$(grep '"val_loss"' "$dir/metrics.jsonl" | tail -1 | val val_loss)
  run_loom eval "$dir/final_checkpoint" --json
  expect_rc "$name: eval in one process, no parallel.* given" 0
  expect_err "$name: says the layout is evaluated in one process" "evaluated in one process"
  one=$(val val_loss <<< "$RUN_OUT") one_tokens=$(val tokens <<< "$RUN_OUT")
  own_out=$(mpirun -np 2 "$LOOM" eval "$dir/final_checkpoint" --json 2>/dev/null)
  own=$(val val_loss <<< "$own_out") own_tokens=$(val tokens <<< "$own_out")
  check "$name: own layout = the run's final val_loss ($own vs $run_loss)" test "$own" = "$run_loss"
  check "$name: one process = own layout within 1e-6 ($one vs $own)" rel_close "$one" "$own"
  check "$name: the same tokens scored ($one_tokens vs $own_tokens)" test "$one_tokens" = "$own_tokens"
  # a run directory stands for its final checkpoint
  run_loom eval "$dir" --json
  expect_rc "$name: eval runs/<id>" 0
  check "$name: eval runs/<id> = eval of its final_checkpoint" test "$(val val_loss <<< "$RUN_OUT")" = "$one"
  expect_out "$name: eval runs/<id> names the checkpoint" "$dir/final_checkpoint"
done
tp=$(ls -d runs/tp2_*)
expect_fail "a layout given is kept: parallel.tp=2 in one process" "give --nproc 2" \
  "$LOOM" eval "$tp/final_checkpoint" parallel.tp=2

# generate runs/<id> = generate runs/<id>/final_checkpoint
a=$("$LOOM" generate "$tp" --prompt-ids 1,2,3 --max-new-tokens 8 --json 2>/dev/null)
b=$("$LOOM" generate "$tp/final_checkpoint" --prompt-ids 1,2,3 --max-new-tokens 8 --json 2>/dev/null)
check "generate runs/<id> = generate its final_checkpoint ($a)" test -n "$a" -a "$a" = "$b"
# a stopped run: its newest periodic checkpoint; a run without one: said
"$LOOM" train base.yaml run.name=stopped "${S[@]}" --stop-after 4 > /dev/null 2>&1
st=$(ls -d runs/stopped_*)
run_loom eval "$st" --json
expect_rc "eval of a stopped run directory" 0
expect_out "... takes its newest complete checkpoint" "$st/checkpoint_3"
"$LOOM" train base.yaml run.name=early "${S[@]}" --stop-after 2 > /dev/null 2>&1
expect_fail "eval of a run without a complete checkpoint" "has no complete checkpoint" \
  "$LOOM" eval "$(ls -d runs/early_*)"
expect_fail "generate of a run without a complete checkpoint" "has no complete checkpoint" \
  "$LOOM" generate "$(ls -d runs/early_*)" --prompt-ids 1
finish
