#!/usr/bin/env bash
# checkpoint.init_from=HF_DIR with no model keys in the run: the model comes from the
# directory's config.json (dense Qwen2 trained by loom and exported; a Qwen3-MoE of random
# weights), training runs, and the losses equal those of the same run given the model keys;
# model keys the run does set are laid over the directory's model: a training setting
# (model.init_std, model.moe.aux_loss_coef) is taken, a key that contradicts the weights is
# refused naming both values (hidden, top_k, the dense layers). A run that names its model
# (model.preset, even the default's value) is checked against the weights as before.
# usage: hf_init_from_test.sh LOOM CKPT_HF_HELPER
. "$(dirname "$0")/../train/common.sh"
HELPER=${2:?usage: $0 loom ckpt_hf_helper}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
make_data || { echo "could not make test data"; exit 1; }
TRAIN=(training.seq_len=16 training.micro_batch_size=2 training.steps=2 training.warmup_steps=1
  data.train_shards="$WORK/train.bin")
DENSE=(model.preset=tiny-qwen2 model.vocab_size=300 model.layers=2 model.hidden=64 model.heads=4
  model.kv_heads=2 model.intermediate=96)
"$LOOM" train "${DENSE[@]}" "${TRAIN[@]}" run.output_dir="$WORK/src" --quiet >/dev/null ||
  { echo "could not train the source run"; exit 1; }
"$LOOM" ckpt export "$WORK"/src/*/final_checkpoint --out "$WORK/hf" >/dev/null 2>&1 ||
  { echo "could not export"; exit 1; }

runs_of() { ls -d "$WORK/$1"/*/ 2>/dev/null | head -1; }
expect_refused() { # what, expected-substring, output dir, overrides...
  local what=$1 want=$2 out=$3; shift 3
  run_loom train "${TRAIN[@]}" run.output_dir="$WORK/$out" "$@" # tests/loom.sh
  if [ $RUN_RC -eq 0 ]; then fail "$what: exit code 0"; run_show
  elif [[ "$RUN_ERR" != *"$want"* ]]; then fail "$what: message lacks '$want'"; run_show
  else pass; fi
  check "$what: no run directory left" test ! -e "$WORK/$out"
}

# ---- dense: no model keys -------------------------------------------------------------------
run_loom train "${TRAIN[@]}" checkpoint.init_from="$WORK/hf" run.output_dir="$WORK/a" --quiet
expect_rc "init_from an HF directory without model keys trains" 0
A=$(runs_of a)
check "train.log: initialised from the directory" grep -q "initialised from $WORK/hf (Hugging Face directory, imported; qwen2 model" "$A/train.log"
check "config.yaml: the directory's model (hidden 64, 2 layers, kv_heads 2, qkv_bias)" \
  grep -q 'hidden: 64' "$A/config.yaml"
check "config.yaml: preset none, arch llama" grep -q 'arch: llama' "$A/config.yaml"
check "config.yaml: q/k/v biases" grep -q 'qkv_bias: "true"' "$A/config.yaml"
run_loom train "${TRAIN[@]}" "${DENSE[@]}" checkpoint.init_from="$WORK/hf" \
  run.output_dir="$WORK/b" --quiet
expect_rc "the same run with the model keys" 0
check "the losses equal those of the run given the model keys (bitwise)" \
  cmp -s <(losses "$A") <(losses "$(runs_of b)")
check "two losses" test "$(losses "$A" | wc -l)" -eq 2
run_loom train "${TRAIN[@]}" checkpoint.init_from="$WORK/hf" model.init_std=0.05 \
  run.output_dir="$WORK/c" --quiet
expect_rc "a model key that does not contradict the weights is taken (model.init_std)" 0
check "config.yaml: init_std 0.05" grep -q 'init_std: 0.05' "$(runs_of c)/config.yaml"
expect_refused "a contradicting key: model.hidden" \
  "holds a qwen2 model with model.hidden = 64, but this run's model has model.hidden = 128" d \
  checkpoint.init_from="$WORK/hf" model.hidden=128
expect_refused "a contradicting key: model.layers" \
  "with model.layers = 2, but this run's model has model.layers = 3" d \
  checkpoint.init_from="$WORK/hf" model.layers=3
expect_refused "the default preset named explicitly is the run's model" \
  "holds qwen2 weights but this run's model is gpt2 (model.preset = tiny-gpt2" d \
  checkpoint.init_from="$WORK/hf" model.preset=tiny-gpt2
mkdir -p "$WORK/badcfg" && cp "$WORK/hf/model.safetensors" "$WORK/badcfg/" &&
  echo '{"model_type": "qwen2", "hidden_size": 64' >"$WORK/badcfg/config.json"
expect_refused "a broken config.json is named" "badcfg/config.json:" d \
  checkpoint.init_from="$WORK/badcfg"

# ---- Qwen3-MoE: no model keys -----------------------------------------------------------------
"$HELPER" flat "$WORK/moe_ck" 5 model.preset=tiny-qwen3-moe model.vocab_size=300 model.layers=3 \
  model.moe.mlp_only_layers=1 model.moe.experts=5 model.moe.top_k=2 >/dev/null &&
  "$LOOM" ckpt export "$WORK/moe_ck" --out "$WORK/moe_hf" >/dev/null 2>&1 ||
  { fail "could not make the MoE directory"; finish; }
run_loom train "${TRAIN[@]}" checkpoint.init_from="$WORK/moe_hf" run.output_dir="$WORK/m" --quiet
expect_rc "init_from a Qwen3-MoE HF directory without model keys trains" 0
M=$(runs_of m)
check "config.yaml: 5 experts, top 2, q/k norms, layer 1 dense" \
  grep -q 'experts: 5' "$M/config.yaml"
check "config.yaml: mlp_only_layers 1" grep -q 'mlp_only_layers: "1"' "$M/config.yaml"
check "config.yaml: qk_norm" grep -q 'qk_norm: "true"' "$M/config.yaml"
check "train.log: a qwen3-moe model" grep -q "qwen3-moe model" "$M/train.log"
run_loom train "${TRAIN[@]}" checkpoint.init_from="$WORK/moe_hf" model.moe.aux_loss_coef=0.01 \
  run.output_dir="$WORK/m2" --quiet
expect_rc "a training setting of the MoE (model.moe.aux_loss_coef) is taken" 0
check "config.yaml: aux_loss_coef 0.01" grep -q 'aux_loss_coef: 0.01' "$(runs_of m2)/config.yaml"
expect_refused "a contradicting key: model.moe.top_k" \
  "holds a qwen3-moe model with model.moe.top_k = 2, but this run's model has model.moe.top_k = 3; set model.moe.top_k=2" \
  e checkpoint.init_from="$WORK/moe_hf" model.moe.top_k=3
expect_refused "a contradicting key: model.moe.experts" \
  "with model.moe.experts = 5, but this run's model has model.moe.experts = 6" e \
  checkpoint.init_from="$WORK/moe_hf" model.moe.experts=6
expect_refused "contradicting dense layers" \
  "whose dense (non-MoE) layers are 1, but this run's model has 0,1; set model.moe.mlp_only_layers=1" \
  e checkpoint.init_from="$WORK/moe_hf" 'model.moe.mlp_only_layers="0,1"'
finish
