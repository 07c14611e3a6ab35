#!/usr/bin/env bash
# Export/import of checkpoints written by `loom train` itself (not by test fixtures): a
# one-process run and, when mpirun is available, a tensor-parallel run (model-r<rank> pieces).
# export -> import must give back weights whose logits (ckpt_hf_helper, loom's forward) are
# bitwise identical to those of the original checkpoint.
# usage: hf_train_test.sh LOOM CKPT_HF_HELPER
. "$(dirname "$0")/../train/common.sh"
HELPER=${2:?usage: $0 loom ckpt_hf_helper}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
make_data || { echo "could not make test data"; exit 1; }
TOKENS=5,17,250,3,3,99,42,7
MODEL=(model.preset=tiny-llama model.vocab_size=300 model.layers=2 model.hidden=64 model.heads=4
  model.kv_heads=2 model.intermediate=96 training.seq_len=16 training.micro_batch_size=2
  training.steps=2 training.warmup_steps=1 data.train_shards="$WORK/train.bin"
  run.output_dir="$WORK/runs")

roundtrip() { # name checkpoint-dir export-options...
  local name=$1 ck=$2; shift 2
  check "$name: export" "$LOOM" ckpt export "$ck" --out "$WORK/$name.hf" "$@"
  check "$name: import" "$LOOM" ckpt import "$WORK/$name.hf" --out "$WORK/$name.back"
  check "$name: logits of the original" "$HELPER" logits "$ck" "$WORK/$name.a" $TOKENS
  check "$name: logits after the round trip" \
    "$HELPER" logits "$WORK/$name.back" "$WORK/$name.b" $TOKENS
  check "$name: identical logits" cmp -s "$WORK/$name.a" "$WORK/$name.b"
}

"$LOOM" train "${MODEL[@]}" run.name=single --quiet >"$WORK/single.log" 2>&1 ||
  { fail "single-process training"; tail -5 "$WORK/single.log" >&2; }
roundtrip single "$(ls -d "$WORK"/runs/single_*)/final_checkpoint" --max-shard-size 20KB

if command -v mpirun >/dev/null; then
  # Open MPI's own allocations show up as leaks in sanitizer builds: not loom's, not checked
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
  timeout 120 mpirun -x ASAN_OPTIONS --oversubscribe --bind-to none -np 2 \
    "$LOOM" train "${MODEL[@]}" \
    parallel.tp=2 run.name=tp2 --quiet >"$WORK/tp2.log" 2>&1 ||
    { fail "tensor-parallel training"; tail -5 "$WORK/tp2.log" >&2; }
  ck="$(ls -d "$WORK"/runs/tp2_*)/final_checkpoint"
  check "tp2: checkpoint in rank pieces" test -f "$ck/model-r00001.safetensors"
  roundtrip tp2 "$ck"
else
  echo "mpirun not found: tensor-parallel checkpoint case skipped"
fi
finish
