#!/usr/bin/env bash
# loom train checks data.tokenizer when it starts (nothing else of training reads it; export
# copies it and generate decodes with it): a missing file, a directory, a truncated
# tokenizer.json, a tokenizer too large for the model and one that is not the shards' are
# refused before any run directory exists, once on several ranks; the messages come from the
# same code as loom generate's. data.tokenizer="" trains without one, and so does the default
# path when it is absent (the data line of train.log says so); an export of a checked run
# carries the tokenizer.
. "$(dirname "$0")/common.sh"
make_data || { echo "could not make test data"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cd "$WORK" || exit 1 # the default data.tokenizer (data/demo/tokenizer.json) is absent here
RUNS="$WORK/runs"
base=(run.output_dir="$RUNS" model.vocab_size=300 training.steps=2 training.seq_len=16
  training.micro_batch_size=2 data.train_shards="$WORK/train.bin" --quiet)
no_runs() { check "$1: no run directory left behind" test -z "$(ls -d "$RUNS"/*/ 2>/dev/null)"; }

expect_fail "a missing tokenizer" \
  "data.tokenizer is '$WORK/gone.json', which does not exist: set it to the tokenizer.json the shards were made with, or data.tokenizer=\"\" to train without one" \
  "$LOOM" train "${base[@]}" data.tokenizer="$WORK/gone.json"
expect_fail "a directory" "data.tokenizer is '$WORK', a directory, not a tokenizer.json" \
  "$LOOM" train "${base[@]}" data.tokenizer="$WORK"
head -c 2000 "$WORK/tok.json" >"$WORK/trunc.json"
expect_fail "a truncated tokenizer.json" "data.tokenizer: $WORK/trunc.json: invalid JSON at line" \
  "$LOOM" train "${base[@]}" data.tokenizer="$WORK/trunc.json"
"$LOOM" data train-tokenizer --vocab-size 823 --out "$WORK/big.json" "$WORK/corpus.txt" >/dev/null ||
  fail "cannot train the 823-token tokenizer"
expect_fail "823 tokens for a 300-token model" \
  "the tokenizer $WORK/big.json has 823 tokens but the model's vocabulary is 300: wrong tokenizer for this model" \
  "$LOOM" train "${base[@]}" data.tokenizer="$WORK/big.json"
expect_fail "823 tokens on shards of a 300-token vocabulary" \
  "the tokenizer $WORK/big.json has 823 tokens but the token shards $WORK/train.bin were written with a vocabulary of 300 (their header): not the tokenizer they were made with" \
  "$LOOM" train "${base[@]}" data.tokenizer="$WORK/big.json" model.vocab_size=1024
run_cmd timeout 120 "$LOOM" train "${base[@]}" data.tokenizer="$WORK/gone.json" --nproc 2 \
  parallel.dp=2 training.micro_batch_size=1
check "two ranks: refused (exit 1) in one line" test "$RUN_RC/$(grep -c . <<<"$RUN_ERR")" = 1/1
no_runs "bad tokenizers"

run_loom train "${base[@]}" data.tokenizer="$WORK/tok.json" run.name=good
expect_rc "the shards' own tokenizer" 0
run_loom train "${base[@]}" 'data.tokenizer=""' run.name=none
expect_rc "data.tokenizer=\"\": no tokenizer" 0
run_loom train "${base[@]}" run.name=default
expect_rc "the default data.tokenizer, absent: trains" 0
check "the default, absent: train.log's data line says so" \
  grep -q "data: .*; no tokenizer (data.tokenizer, the default, does not exist)" "$(ls -d "$RUNS"/default_*)/train.log"

# the same check as generate's: its message for a run whose tokenizer went after training
G=$(ls -d "$RUNS"/good_*)
run_loom ckpt export "$G/final_checkpoint" --out "$WORK/good.hf"
expect_rc "export of a checked run" 0
check "the export carries the tokenizer" cmp -s "$WORK/tok.json" "$WORK/good.hf/tokenizer.json"
cp "$WORK/tok.json" "$WORK/later.json"
run_loom train "${base[@]}" data.tokenizer="$WORK/later.json" run.name=later
rm "$WORK/later.json"
expect_fail "generate names the run's missing tokenizer as train does" \
  "data.tokenizer of $(ls -d "$RUNS"/later_*)/final_checkpoint/config.yaml is '$WORK/later.json', which does not exist" \
  "$LOOM" generate "$(ls -d "$RUNS"/later_*)/final_checkpoint" --prompt "Once"
finish
