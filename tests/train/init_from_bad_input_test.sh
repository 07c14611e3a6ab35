#!/usr/bin/env bash
# checkpoint.init_from with weights that are not the run's model, or not weights at all: a
# clear error (which key, which tensor, expected and found, what to do), a non-zero exit, no
# run directory and no temporary import left behind. Also init_from together with --resume.
. "$(dirname "$0")/common.sh"
make_data || { echo "could not make test data"; exit 1; }
RUNS="$WORK/runs"
GPT2=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64
  model.intermediate=128 training.seq_len=16 training.micro_batch_size=2 training.steps=2
  data.train_shards="$WORK/train.bin")
"$LOOM" train "${GPT2[@]}" run.output_dir="$WORK/src" run.name=src checkpoint.every=1 --quiet >/dev/null ||
  { echo "could not train the source run"; exit 1; }
SRC=$(ls -d "$WORK"/src/src_*)
CK="$SRC/final_checkpoint"
"$LOOM" ckpt export "$CK" --out "$WORK/hf" >/dev/null || { echo "could not export"; exit 1; }

expect_fail() { # what, expected-substring, overrides... (one process, output to $RUNS)
  local what=$1 want=$2; shift 2
  run_loom train "${GPT2[@]}" run.output_dir="$RUNS" "$@" # tests/loom.sh
  if [ $RUN_RC -eq 0 ]; then fail "$what: exit code 0"; run_show
  elif [[ "$RUN_ERR" != *"$want"* ]]; then fail "$what: message lacks '$want': $RUN_ERR"; run_show
  else pass; fi
  check "$what: no run directory or temporary import left" test ! -e "$RUNS"
}
expect_fail "missing directory" "checkpoint.init_from: '$WORK/none' does not exist; give a loom checkpoint directory" \
  checkpoint.init_from="$WORK/none"
expect_fail "a file, not a directory" "is a file, not a directory" checkpoint.init_from="$CK/model.safetensors"
expect_fail "a run directory" "is a run directory, not a checkpoint; give its checkpoint: $SRC/final_checkpoint" \
  checkpoint.init_from="$SRC"
mkdir -p "$WORK/empty"
expect_fail "a directory without weights" "holds neither config.yaml (a loom checkpoint) nor config.json" \
  checkpoint.init_from="$WORK/empty"
expect_fail "wrong family (GPT-2 weights, llama config)" \
  "holds gpt2 weights but this run's model is llama (model.preset = tiny-llama, model.arch = \"\"): tensor 'layers.0.mlp.gate.weight': the model expects [128, 64], the weights have no such tensor; set model.preset (or model.arch)" \
  checkpoint.init_from="$CK" model.preset=tiny-llama
expect_fail "wrong family from a Hugging Face directory" "holds gpt2 weights but this run's model is llama" \
  checkpoint.init_from="$WORK/hf" model.preset=tiny-llama
expect_fail "hidden size" \
  "holds a gpt2 model with model.hidden = 64, but this run's model has model.hidden = 128: tensor 'embed.weight': the model expects 300 (+ padding) x 128, the weights have 300 x 64; set model.hidden=64" \
  checkpoint.init_from="$CK" model.hidden=128 model.intermediate=128
expect_fail "layers" \
  "with model.layers = 2, but this run's model has model.layers = 3: tensor 'layers.2.attn_norm.weight': the model expects [64], the weights have no such tensor; set model.layers=2" \
  checkpoint.init_from="$CK" model.layers=3
expect_fail "fewer layers" "tensor 'layers.1.attn_norm.weight': the weights have it ([64]), the model does not; set model.layers=2" \
  checkpoint.init_from="$CK" model.layers=1
expect_fail "vocabulary" "model.vocab_size = 300, but this run's model has model.vocab_size = 320" \
  checkpoint.init_from="$CK" model.vocab_size=320
expect_fail "vocabulary, Hugging Face directory" "'$WORK/hf' holds a gpt2 model with model.vocab_size = 300, but this run's model has model.vocab_size = 320" \
  checkpoint.init_from="$WORK/hf" model.vocab_size=320
expect_fail "several keys: the fix names all of them" "set model.hidden=64 model.layers=2 model.head_dim=16 (or give" \
  checkpoint.init_from="$CK" model.hidden=128 model.layers=3
expect_fail "tied embeddings" "tensor 'lm_head.weight': the model expects [320, 64], the weights have no such tensor; set model.tied_embeddings=true" \
  checkpoint.init_from="$CK" model.tied_embeddings=false
# qwen2 (q/k/v biases) weights into a llama model: the key is model.qkv_bias, not the family
QWEN=(model.preset=tiny-llama model.layers=1 model.qkv_bias=true)
"$LOOM" train "${GPT2[@]}" "${QWEN[@]}" training.steps=1 run.output_dir="$WORK/qsrc" --quiet >/dev/null ||
  fail "qwen2 source run"
QCK="$(ls -d "$WORK"/qsrc/*/)final_checkpoint"
expect_fail "q/k/v biases" "holds a qwen2 model with model.qkv_bias = true, but this run's model has model.qkv_bias = false: tensor 'layers.0.attn.q.bias': the weights have it ([64]), the model does not; set model.qkv_bias=true" \
  checkpoint.init_from="$QCK" model.preset=tiny-llama model.layers=1 model.qkv_bias=false
expect_fail "MLP size" "set model.intermediate=128" checkpoint.init_from="$CK" model.intermediate=192
# a Hugging Face directory whose weights are damaged or missing
mkdir -p "$WORK/hf_nofile" && cp "$WORK/hf/config.json" "$WORK/hf_nofile/"
expect_fail "Hugging Face directory without weights" \
  "importing the Hugging Face directory '$WORK/hf_nofile': '$WORK/hf_nofile' holds neither model.safetensors nor model.safetensors.index.json" \
  checkpoint.init_from="$WORK/hf_nofile"
cp -r "$WORK/hf" "$WORK/hf_short" && truncate -s 2000 "$WORK/hf_short/model.safetensors"
expect_fail "truncated Hugging Face weights" \
  "checkpoint.init_from: importing the Hugging Face directory '$WORK/hf_short': '$WORK/hf_short/model.safetensors': header length" \
  checkpoint.init_from="$WORK/hf_short"
check "no temporary files anywhere" test -z "$(find "$WORK" -name '*.tmp*')"
# the import's directory under a run.output_dir that did not exist: every level is removed
"$LOOM" train "${GPT2[@]}" run.output_dir="$WORK/deep/a/b" checkpoint.init_from="$WORK/hf" \
  model.layers=3 >/dev/null 2>&1 && fail "mismatch under a new output directory: exit code 0"
check "no output directory levels left behind" test ! -e "$WORK/deep"
# an imported (weights-only) checkpoint cannot be resumed: the error says to use init_from
"$LOOM" ckpt import "$WORK/hf" --out "$WORK/imported" >/dev/null || fail "import"
err=$("$LOOM" train --resume "$WORK/imported" data.train_shards="$WORK/train.bin" 2>&1 >/dev/null); rc=$?
if [ $rc -ne 0 ] && [[ "$err" == *"it holds weights only (as \`loom ckpt import\` writes) and cannot be resumed; start a new run from it with checkpoint.init_from=$WORK/imported"* ]]; then pass
else fail "resuming an imported checkpoint: rc $rc: $err"; fi
check "resuming an imported checkpoint wrote nothing next to it" test "$(ls "$WORK" | grep -c config.yaml)" = 0

# several ranks: every rank stops with the same message, nothing left
if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  err=$(ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 timeout 120 mpirun -x ASAN_OPTIONS \
    --oversubscribe --bind-to none -np 2 "$LOOM" train "${GPT2[@]}" run.output_dir="$RUNS" parallel.tp=2 \
    checkpoint.init_from="$WORK/hf" model.hidden=128 model.intermediate=128 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [[ "$err" == *"set model.hidden=64"* ]]; then pass; else fail "2 ranks, mismatch: rc $rc: $err"; fi
  check "2 ranks: no run directory or temporary import left" test ! -e "$RUNS"
fi

# --resume with init_from: resuming the run wins when init_from is the run's own; another
# init_from is refused (the weights would not come from it)
"$LOOM" train "${GPT2[@]}" run.output_dir="$WORK/ft" run.name=ft checkpoint.every=1 \
  checkpoint.init_from="$CK" --stop-after 1 --quiet >/dev/null 2>&1 || fail "fine-tune run"
FT=$(ls -d "$WORK"/ft/ft_*)
err=$("$LOOM" train --resume "$FT/checkpoint_1" checkpoint.init_from="$SRC/checkpoint_1" 2>&1 >/dev/null); rc=$?
if [ $rc -ne 0 ] && [[ "$err" == *"checkpoint.init_from = '$SRC/checkpoint_1' together with --resume $FT/checkpoint_1, a run that started from '$CK'"* ]]; then pass
else fail "init_from that differs from the resumed run's: rc $rc: $err"; fi
check "refused resume left the run as it was (1 step)" test "$(losses "$FT" | wc -l)" = 1
err=$("$LOOM" train --resume "$SRC/checkpoint_1" checkpoint.init_from="$CK" 2>&1 >/dev/null); rc=$?
if [ $rc -ne 0 ] && [[ "$err" == *"a run that started from fresh initialisation"* ]]; then pass
else fail "init_from on resuming a run that had none: rc $rc: $err"; fi
if "$LOOM" train --resume "$FT/checkpoint_1" --quiet >/dev/null 2>&1; then
  check "resuming the fine-tune: train.log says init_from is not loaded again" grep -q "not loaded again" "$FT/train.log"
  check "resuming the fine-tune: 2 steps" test "$(losses "$FT" | wc -l)" = 2
else fail "resuming a fine-tune"; fi
finish
