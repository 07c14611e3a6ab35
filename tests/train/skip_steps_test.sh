#!/usr/bin/env bash
# training.skip_steps ("3-4,7": Megatron-LM's --skip-train-iteration-range, to get past a loss
# spike) as users run it. The skipped steps read their batches and train on nothing, so a run
# with them equals, bitwise, the run on data cut to lack exactly those batches
# (skip_steps_cut.py cuts the token shard); the learning-rate schedule follows the steps
# trained (as Megatron's); metrics.jsonl and train.log show the skipped steps; a resume keeps
# skipping (same layout: bitwise; dp=2: within the layouts' tolerance); bad ranges are named.
. "$(dirname "$0")/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }
CUT="$(dirname "$0")/skip_steps_cut.py"
RUNS="$WORK/runs"
python3 "$CUT" base "$WORK/train.bin" "$WORK/base.bin" 32 || { echo "cannot make the shard"; exit 1; }
M=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64
  training.seq_len=32 training.micro_batch_size=2 training.log_every=1 run.seed=7
  training.lr_schedule=constant training.warmup_steps=0 training.warmup_ratio=0
  data.tokenizer="$WORK/tok.json" checkpoint.every=1000)
dir() { ls -d "$RUNS/$1"_* | head -1; }
# trained losses of a run (skipped steps have none), one per line, exact
trained() { losses "$1"; }
lrs() { sed -n 's/.*"lr": \([^,]*\),.*/\1/p' "$1/metrics.jsonl"; }

# --- the run with skipped steps equals the run on the cut data ------------------------------
run_loom train "${M[@]}" data.train_shards="$WORK/base.bin" training.steps=10 \
  "training.skip_steps=3-4 7" run.name=skip run.output_dir="$RUNS"
expect_rc "training.skip_steps=3-4,7" 0
A=$(dir skip)
python3 "$CUT" cut "$WORK/base.bin" "$WORK/cut.bin" 32 2 7 3-4,7 || fail "cannot cut the shard"
run_loom train "${M[@]}" data.train_shards="$WORK/cut.bin" training.steps=7 run.name=cut \
  run.output_dir="$RUNS" --quiet
expect_rc "the cut data" 0
B=$(dir cut)
check "10 steps, 7 trained" test "$(trained "$A" | wc -l)" = 7
check "the losses of the data without those batches, bitwise" test "$(trained "$A")" = "$(trained "$B")"
run_loom ckpt compare "$A/final_checkpoint" "$B/final_checkpoint" --rtol 0
expect_rc "final weights bitwise those of the cut data (ckpt compare --rtol 0)" 0
check "metrics.jsonl: steps 3, 4, 7 skipped, without a loss" \
  test "$(grep -c '"skipped": true' "$A/metrics.jsonl")/$(grep '"skipped": true' "$A/metrics.jsonl" | grep -c '"loss"')" = 3/0
check "metrics.jsonl: every step is there" test "$(sed -n 's/^{"step": \([0-9]*\),.*/\1/p' "$A/metrics.jsonl" | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 9 10 "
check "train.log: the skipped steps" test "$(grep -c 'skipped (training.skip_steps)' "$A/train.log")" = 3
check "train.log: the key noted at the start" grep -q "training.skip_steps 3-4 7: 3 steps read, not trained on" "$A/train.log"
check "summary.json counts 10 steps" grep -q '"steps": 10' "$A/summary.json"
check "the registry counts 10 steps" test "$("$LOOM" runs --runs-dir "$RUNS" --filter "name = 'skip'" --format csv --show steps | tail -1)" = 10

# --- the learning-rate schedule follows the steps trained (Megatron) ---------------------
C=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64 training.seq_len=32
  training.micro_batch_size=2 training.log_every=1 data.tokenizer="$WORK/tok.json"
  data.train_shards="$WORK/base.bin" training.steps=10 training.lr_schedule=cosine
  training.warmup_steps=3 run.output_dir="$RUNS" --quiet)
run_loom train "${C[@]}" run.name=cos
run_loom train "${C[@]}" run.name=cosskip training.skip_steps=2-3
want=$(lrs "$(dir cos)" | head -8 | tr '\n' ' ')
got=$(grep -v '"skipped"' "$(dir cosskip)/metrics.jsonl" | sed -n 's/.*"lr": \([^,]*\),.*/\1/p' | tr '\n' ' ')
check "cosine: the trained steps' lrs are the schedule's first 8" test "$got" = "$want"
check "cosine: a skipped step shows the lr of the next trained one" \
  test "$(sed -n '2p' "$(dir cosskip)/metrics.jsonl" | sed 's/.*"lr": \([^,]*\),.*/\1/')" = "$(lrs "$(dir cos)" | sed -n 2p)"

# --- a resume keeps skipping: same layout bitwise, dp=2 within tolerance -------------------
R=("${M[@]}" data.train_shards="$WORK/base.bin" training.steps=10 'training.skip_steps="3-4,7"'
   checkpoint.every=4 run.name=res run.output_dir="$RUNS" --quiet)
run_loom train "${R[@]}" --stop-after 5
RES=$(dir res)  # named once: forks below are res_* too, and may start within the same second
run_loom train --resume "$RES" --quiet
expect_rc "resume from checkpoint_4 (a skipped step)" 0
check "resumed: the losses of the uninterrupted run, bitwise" test "$(trained "$RES")" = "$(trained "$A")"
run_cmd timeout 300 "$LOOM" train --resume "$RES/checkpoint_4" --nproc 2 parallel.dp=2 \
  training.micro_batch_size=1 --quiet
expect_rc "resume at step 4 on 2 ranks (dp=2, a fork)" 0
F=$(ls -d "$RUNS"/res_* | grep -vxF "$RES")
check "dp=2 fork: skips step 7 too (trained 5, 6, 8, 9, 10)" test "$(trained "$F" | wc -l)" = 5
worst=$(paste <(trained "$A" | tail -5) <(trained "$F") | awk '{ r = ($1 - $2) / $1; if (r < 0) r = -r; if (r > w) w = r } END { print w + 0 }')
check "dp=2 fork: the losses of the one-process run within 1e-5 (worst $worst)" awk -v w="$worst" 'BEGIN { exit !(w < 1e-5) }'
expect_fail "a resume may not change the skipped steps before the checkpoint" \
  "training.skip_steps is '3 7', but the run of $RES/checkpoint_4 skipped '3-4,7'" \
  "$LOOM" train --resume "$RES/checkpoint_4" "training.skip_steps=3 7" --quiet
run_loom train --resume "$RES/checkpoint_4" "training.skip_steps=3-4 6-8" --quiet
expect_rc "a fork may add ranges after the checkpoint" 0

# --- bad ranges are named ------------------------------------------------------------------
for bad in "5-3|'5-3' ends before it starts (write 3-5)" "0-2|'0-2': steps count from 1" \
  "abc|'abc' is not a step or a range of steps" "1-5 4-6|1-5 and 4-6 overlap" \
  "3-|'3-' is not a step or a range of steps"; do
  expect_fail "training.skip_steps=${bad%%|*}" "training.skip_steps: ${bad#*|}" \
    "$LOOM" train "${M[@]}" data.train_shards="$WORK/base.bin" "training.skip_steps=${bad%%|*}"
done
expect_fail "loom config show checks it too" "'5-3' ends before it starts" \
  "$LOOM" config show training.skip_steps=5-3
check "no run directory for a bad range" test "$(ls -d "$RUNS"/*/ | wc -l)" = 7
finish
