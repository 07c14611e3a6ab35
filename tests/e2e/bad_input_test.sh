#!/usr/bin/env bash
# Bad input along the user path (tests/e2e/user_path_test.sh), each step as a user types it:
# missing files (corpus, tokenizer, shards, checkpoint, image), the wrong model family for
# checkpoint.init_from (GPT-2 weights into a Qwen2 config, in a 4-rank layout and from a
# Hugging Face directory), a prompt longer than the model's max_seq, --image with a text-only
# model, export/import onto an existing directory. Each must exit non-zero with a message
# that names the file/key and what to do, and leave nothing behind: no output file, no run
# directory, no temporary import under $TMPDIR, an existing export directory unchanged.
# usage: bad_input_test.sh LOOM
. "$(dirname "$0")/../train/common.sh"
LOOM=$(realpath "$LOOM")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
make_data || { echo "could not make test data"; exit 1; }
RUNS="$WORK/runs"
GPT2=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64 model.intermediate=128
  model.max_seq=64 training.seq_len=32 training.micro_batch_size=2 training.steps=2
  data.train_shards="$WORK/train.bin" data.tokenizer="$WORK/tok.json")
QWEN2=(model.preset=tiny-qwen2 model.vocab_size=300 model.layers=2 model.hidden=64 model.heads=4
  model.kv_heads=2 model.intermediate=96 training.seq_len=32 training.micro_batch_size=2
  training.steps=2 data.train_shards="$WORK/train.bin" data.tokenizer="$WORK/tok.json")
"$LOOM" train "${GPT2[@]}" run.output_dir="$WORK/src" run.name=src --quiet >/dev/null 2>&1 ||
  { echo "could not train the source run"; exit 1; }
CK=$(ls -d "$WORK"/src/src_*/final_checkpoint)
"$LOOM" ckpt export "$CK" --out "$WORK/gpt2.hf" >/dev/null 2>&1 &&
  "$LOOM" ckpt import "$WORK/gpt2.hf" --out "$WORK/gpt2.imported" >/dev/null 2>&1 ||
  { echo "could not export/import"; exit 1; }
# temporary imports (a Hugging Face directory given to init_from / eval) go under $TMPDIR
export TMPDIR="$WORK/tmp"
mkdir -p "$TMPDIR"

# expect_fail WHAT EXPECTED-SUBSTRING command... (tests/loom.sh): non-zero exit, the message;
# then the caller checks what must not exist
nothing() { # what paths...: none of them exists, and $TMPDIR is empty
  local what=$1 p; shift
  for p in "$@"; do check "$what: nothing left at ${p#"$WORK"/}" test ! -e "$p"; done
  check "$what: no temporary files left in \$TMPDIR" test -z "$(ls -A "$TMPDIR")"
}

echo "data"
expect_fail "train-tokenizer, missing corpus" "$WORK/none.txt: cannot open: No such file" \
  "$LOOM" data train-tokenizer --vocab-size 300 --out "$WORK/t2.json" "$WORK/none.txt"
nothing "train-tokenizer" "$WORK/t2.json"
expect_fail "tokenize, missing tokenizer" "$WORK/none.json: no such file; pass a tokenizer.json" \
  "$LOOM" data tokenize --tokenizer "$WORK/none.json" --out "$WORK/x.bin" "$WORK/corpus.txt"
nothing "tokenize, missing tokenizer" "$WORK/x.bin"
expect_fail "tokenize, missing text" "$WORK/none.txt: cannot open: No such file" \
  "$LOOM" data tokenize --tokenizer "$WORK/tok.json" --out "$WORK/x.bin" "$WORK/none.txt"
nothing "tokenize, missing text" "$WORK/x.bin"

echo "train"
expect_fail "missing train shards" "data.train_shards: $WORK/none.bin: no token shard matches" \
  "$LOOM" train "${GPT2[@]}" data.train_shards="$WORK/none.bin" run.output_dir="$RUNS" --quiet
expect_fail "missing train shards, 4 ranks" "data.train_shards: $WORK/none.bin: no token shard matches" \
  "$LOOM" train "${GPT2[@]}" data.train_shards="$WORK/none.bin" run.output_dir="$RUNS" --quiet \
  --nproc 4 parallel.dp=2 parallel.tp=2
# an error every rank finds alike is reported once, as one whole line
err=$("$LOOM" train "${GPT2[@]}" data.train_shards="$WORK/none.bin" run.output_dir="$RUNS" --quiet \
  --nproc 4 parallel.dp=2 parallel.tp=2 2>&1 >/dev/null)
check "missing train shards, 4 ranks: one error line ($(grep -c 'error:' <<<"$err") lines)" \
  test "$(grep -c 'error:' <<<"$err")" = 1 -a "$(grep -c "^loom train: error: data.train_shards: $WORK/none.bin: no token shard matches (not a file, a directory or a glob with matches); create shards with 'loom data tokenize'$" <<<"$err")" = 1
expect_fail "missing val shards" "data.val_shards: $WORK/none.bin: no token shard matches" \
  "$LOOM" train "${GPT2[@]}" data.val_shards="$WORK/none.bin" training.eval_every=1 run.output_dir="$RUNS" --quiet
expect_fail "init_from a missing checkpoint" "checkpoint.init_from: '$WORK/none' does not exist" \
  "$LOOM" train "${GPT2[@]}" checkpoint.init_from="$WORK/none" run.output_dir="$RUNS" --quiet
expect_fail "init_from GPT-2 weights into a Qwen2 config, tp2 x pp2" \
  "checkpoint.init_from: '$WORK/gpt2.imported' holds gpt2 weights but this run's model is qwen2 (model.preset = tiny-qwen2" \
  "$LOOM" train "${QWEN2[@]}" checkpoint.init_from="$WORK/gpt2.imported" run.output_dir="$RUNS" --quiet \
  --nproc 4 parallel.tp=2 parallel.pp=2
expect_fail "init_from a GPT-2 Hugging Face directory into a Qwen2 config" \
  "holds gpt2 weights but this run's model is qwen2" \
  "$LOOM" train "${QWEN2[@]}" checkpoint.init_from="$WORK/gpt2.hf" run.output_dir="$RUNS" --quiet
# a Hugging Face directory is imported by rank 0 under run.output_dir: removed before any
# rank aborts the job (src/train/init_from.c)
expect_fail "init_from a GPT-2 Hugging Face directory into a Qwen2 config, tp2 x pp2" \
  "holds gpt2 weights but this run's model is qwen2" \
  "$LOOM" train "${QWEN2[@]}" checkpoint.init_from="$WORK/gpt2.hf" run.output_dir="$RUNS" --quiet \
  --nproc 4 parallel.tp=2 parallel.pp=2
expect_fail "the fix is named" "set model.preset (or model.arch) to the weights' model" \
  "$LOOM" train "${QWEN2[@]}" checkpoint.init_from="$WORK/gpt2.hf" run.output_dir="$RUNS" --quiet
nothing "bad training input" "$RUNS"

echo "export, import, eval"
expect_fail "export a missing checkpoint" "checkpoint '$WORK/none' is not a directory" \
  "$LOOM" ckpt export "$WORK/none" --out "$WORK/x.hf"
nothing "export a missing checkpoint" "$WORK/x.hf"
before=$(cd "$WORK/gpt2.hf" && sha256sum -- * | sha256sum)
expect_fail "export to an existing directory" "output '$WORK/gpt2.hf' already exists; remove it, choose another --out, or pass --force" \
  "$LOOM" ckpt export "$CK" --out "$WORK/gpt2.hf"
check "export to an existing directory: its files unchanged" test "$(cd "$WORK/gpt2.hf" && sha256sum -- * | sha256sum)" = "$before"
check "export to an existing directory: no temporary sibling left" \
  test "$(ls -A "$WORK" | grep -c '^gpt2\.hf')" = 1
expect_fail "import a missing directory" "'$WORK/none.hf' is not a directory; give a Hugging Face model directory" \
  "$LOOM" ckpt import "$WORK/none.hf" --out "$WORK/y"
nothing "import a missing directory" "$WORK/y"
before=$(cd "$WORK/gpt2.imported" && sha256sum -- * | sha256sum)
expect_fail "import to an existing directory" "output '$WORK/gpt2.imported' already exists" \
  "$LOOM" ckpt import "$WORK/gpt2.hf" --out "$WORK/gpt2.imported"
check "import to an existing directory: its files unchanged" \
  test "$(cd "$WORK/gpt2.imported" && sha256sum -- * | sha256sum)" = "$before"
expect_fail "eval a missing checkpoint" "checkpoint '$WORK/none' does not exist" "$LOOM" eval "$WORK/none"
expect_fail "eval with missing --data" "no token shard matches" \
  "$LOOM" eval "$CK" --data "$WORK/none.bin"
nothing "eval" "$WORK/none"

echo "generate"
expect_fail "a missing checkpoint" "checkpoint '$WORK/none' does not exist" \
  "$LOOM" generate "$WORK/none" --prompt "Once"
expect_fail "--tokenizer missing" "$WORK/none.json: no such file" \
  "$LOOM" generate "$CK" --tokenizer "$WORK/none.json" --prompt "Once"
cp "$WORK/tok.json" "$WORK/gone.json" # loom train checks data.tokenizer: it goes after training
"$LOOM" train "${GPT2[@]}" data.tokenizer="$WORK/gone.json" run.output_dir="$WORK/notok" --quiet >/dev/null 2>&1 ||
  fail "a run whose tokenizer goes after training"
rm "$WORK/gone.json"
expect_fail "the run's data.tokenizer is gone" "data.tokenizer of $WORK/notok/" \
  "$LOOM" generate "$(ls -d "$WORK"/notok/*/final_checkpoint)" --prompt "Once"
"$LOOM" ckpt export "$(ls -d "$WORK"/notok/*/final_checkpoint)" --out "$WORK/notok.hf" >/dev/null 2>"$WORK/notok.err" ||
  fail "export of a run whose tokenizer is gone"
check "export of a run whose tokenizer is gone: a note, no tokenizer.json" \
  bash -c "grep -q \"note: the run's tokenizer (data.tokenizer '$WORK/gone.json') does not exist\" '$WORK/notok.err' && test ! -e '$WORK/notok.hf/tokenizer.json'"
expect_fail "generate from an export without tokenizer.json" "$WORK/notok.hf has no tokenizer.json; pass --tokenizer" \
  "$LOOM" generate "$WORK/notok.hf" --prompt "Once"
long=$(head -c 400 "$WORK/corpus.txt")
expect_fail "a prompt longer than max_seq" "but the model's max_seq is 64: at most 63 prompt tokens leave room for one new token; shorten the prompt" \
  "$LOOM" generate "$CK" --prompt "$long"
expect_fail "a prompt longer than max_seq, Hugging Face directory" "but the model's max_seq is 64" \
  "$LOOM" generate "$WORK/gpt2.hf" --prompt-ids "$(seq -s, 1 70)"
"$LOOM" data synth-vqa --out "$WORK/vqa" --samples 8 --shard-size 8 >/dev/null 2>&1 &&
  tar -xf "$WORK/vqa/000000.tar" -C "$WORK" 00000000.jpg || fail "could not make an image"
expect_fail "--image with a text-only model" "is a text-only model (model.preset 'tiny-gpt2' has no vision encoder): drop --image" \
  "$LOOM" generate "$CK" --image "$WORK/00000000.jpg" --prompt "What colour is the circle?"
expect_fail "--image with a text-only Hugging Face model" "text-only model" \
  "$LOOM" generate "$WORK/gpt2.hf" --image "$WORK/00000000.jpg" --prompt "What colour is the circle?"
nothing "generate" "$WORK/none"
finish
