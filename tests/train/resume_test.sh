#!/usr/bin/env bash
# Resume determinism: N steps straight == N/2 steps, save, stop, load, N/2 more steps —
# the loss sequence must be bitwise identical (compared as exact decimal text of each
# double), for GPT-2 fp32, Llama bf16 with activation checkpointing and grad accumulation.
. "$(dirname "$0")/common.sh"
make_data || { echo "could not make test data"; exit 1; }

run_case() { # name, extra overrides...
  local name=$1; shift
  local common=(run.output_dir="$WORK/runs_$name" model.vocab_size=300 model.hidden=64 \
    model.heads=4 model.layers=2 model.max_seq=64 training.seq_len=32 \
    training.micro_batch_size=4 training.steps=12 training.warmup_steps=3 \
    data.train_shards="$WORK/train.bin" checkpoint.every=6 training.log_every=1 "$@")
  "$LOOM" train "${common[@]}" run.name=straight --quiet >/dev/null
  "$LOOM" train "${common[@]}" run.name=cut --stop-after 6 --quiet >/dev/null
  local a b
  a=$(ls -d "$WORK/runs_$name"/straight_*)
  b=$(ls -d "$WORK/runs_$name"/cut_*)
  check "$name: checkpoint_6 written" test -f "$b/checkpoint_6/model.safetensors"
  check "$name: interrupted run stopped at 6" test "$(losses "$b" | wc -l)" = 6
  check "$name: no final checkpoint before resume" test ! -e "$b/final_checkpoint"
  "$LOOM" train --resume "$b/checkpoint_6" --quiet >/dev/null
  check "$name: resumed run has 12 steps" test "$(losses "$b" | wc -l)" = 12
  check "$name: final checkpoint after resume" test -f "$b/final_checkpoint/model.safetensors"
  if [ "$(losses "$a")" = "$(losses "$b")" ]; then pass; else
    fail "$name: losses differ after resume"; diff <(losses "$a") <(losses "$b") >&2; fi
  check "$name: final weights identical" cmp -s "$a/final_checkpoint/model.safetensors" \
    "$b/final_checkpoint/model.safetensors"
  check "$name: no temporary files left" test -z "$(find "$WORK/runs_$name" -name '*.tmp.*')"
  check "$name: run dir layout" test -f "$a/config.yaml" -a -f "$a/train.log" -a -f "$a/summary.json"
}

run_case gpt2 model.preset=tiny-gpt2
run_case llama model.preset=tiny-llama training.dtype=bf16 \
  training.activation_checkpointing=true training.grad_accum=2
finish
