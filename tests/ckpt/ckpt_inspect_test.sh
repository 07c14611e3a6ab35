#!/usr/bin/env bash
# `loom ckpt inspect` and the checkpoint readers on checkpoints written by `loom train`:
#  - the global view: the same fresh weights (training.steps=0) saved by one process and, with
#    mpirun, by tp=2, dp=2 ZeRO-3 and pp=2 list every tensor once with the same global shape,
#    dtype and statistics; the parameter count is train.log's; the AdamW moments are counted
#    apart (not as parameters); vectors print as [n]; --pieces shows each rank's slices;
#    --json carries the same view.
#  - a checkpoint whose COMPLETE marker lists a missing or resized file: inspect, eval,
#    generate, ckpt export and ckpt compare exit 1 naming the file and the newest complete
#    checkpoint of the run to use instead (or saying there is none).
# usage: ckpt_inspect_test.sh LOOM
. "$(dirname "$0")/../train/common.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
make_data || { echo "could not make test data"; exit 1; }
MODEL=(model.preset=tiny-qwen2 model.vocab_size=300 model.layers=2 model.hidden=64 model.heads=4
  model.kv_heads=2 model.intermediate=96 training.seq_len=16 training.micro_batch_size=2
  data.train_shards="$WORK/train.bin" data.tokenizer="$WORK/tok.json" run.output_dir="$WORK/runs")

# table NAME CKPT: the rows of the default view (name dtype shape... statistics) in NAME.tab
table() {
  "$LOOM" ckpt inspect "$2" >"$WORK/$1.txt" 2>&1 || { fail "$1: inspect exit $?"; cat "$WORK/$1.txt" >&2; }
  awk '/^name /{f=1; next} /^$/{f=0} f' "$WORK/$1.txt" >"$WORK/$1.tab"
}

# ---- the global view --------------------------------------------------------------------------
"$LOOM" train "${MODEL[@]}" training.steps=0 run.name=one --quiet >"$WORK/one.log" 2>&1 ||
  { fail "one-process save"; tail -3 "$WORK/one.log" >&2; }
one=$(ls -d "$WORK"/runs/one_*)
table one "$one/final_checkpoint"
params=$(sed -n 's/.*model: [a-z0-9]*, \([0-9]*\) parameters.*/\1/p' "$one/train.log")
check "parameter count is train.log's ($params)" grep -q "^parameters: $params " "$WORK/one.txt"
stored=$(sed -n 's/.*parameters (\([0-9]*\) with vocab padding).*/\1/p' "$one/train.log")
check "stored with the padding ($stored)" grep -q "^parameters: $params .*, $stored stored with the vocabulary's padding rows (300 tokens)" "$WORK/one.txt"
check "moments counted apart" grep -q "^  exp_avg  *$stored values" "$WORK/one.txt"
check "every tensor once" [ "$(awk '{print $1}' "$WORK/one.tab" | sort | uniq -d | wc -l)" = 0 ]
check "vectors print as [n]" grep -q "^layers.0.attn_norm.weight  *F32  *\[64\] " "$WORK/one.tab"
check "no exp_avg rows among the parameters" [ "$(grep -c '^exp_avg' "$WORK/one.tab")" = 0 ]
check "complete: yes" grep -q "^complete: yes (step 0" "$WORK/one.txt"
run_loom ckpt inspect --json "$one/final_checkpoint"
expect_rc "inspect --json" 0
check "--json: the same view" python3 - "$RUN_DIR/out" "$params" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
assert d["param_count"] == n and d["complete"] is True, d["param_count"]
m = d["stored_count"]
assert d["optimizer"]["exp_avg"]["values"] == m and d["optimizer"]["exp_avg_sq"]["values"] == m
assert sum(t["numel"] for t in d["tensors"]) == m and d["vocab_size"] == 300
assert all(t["held"] == t["numel"] for t in d["tensors"])
assert [t["shape"] for t in d["tensors"] if t["name"] == "final_norm.weight"] == [[64]]
EOF

if command -v mpirun >/dev/null; then
  for lay in "tp2 parallel.tp=2" "z3 parallel.dp=2 parallel.zero=3" "pp2 parallel.pp=2"; do
    set -- $lay
    name=$1
    shift
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 timeout 120 \
      "$LOOM" train "${MODEL[@]}" training.steps=0 run.name="$name" "$@" --nproc 2 --quiet \
      >"$WORK/$name.log" 2>&1 || { fail "$name save"; tail -3 "$WORK/$name.log" >&2; continue; }
    ck="$(ls -d "$WORK"/runs/"$name"_*)/final_checkpoint"
    check "$name: written in rank pieces" test -f "$ck/model-r00001.safetensors"
    table "$name" "$ck"
    check "$name: the same tensors, shapes and statistics as one process" \
      cmp -s "$WORK/one.tab" "$WORK/$name.tab"
    check "$name: parameter count" grep -q "^parameters: $params " "$WORK/$name.txt"
    check "$name: the layout" grep -q "^written by: 2 ranks" "$WORK/$name.txt"
  done
  ck="$(ls -d "$WORK"/runs/tp2_*)/final_checkpoint"
  run_loom ckpt inspect --pieces "$ck"
  expect_rc "--pieces" 0
  expect_out "--pieces: rank 1's file" "model-r00001.safetensors"
  expect_out "--pieces: a tensor-parallel slice" "layers.0.attn.q.weight[32:64, :] of [64, 64]"
  expect_out "--pieces: a vector's slice" "layers.0.attn.q.bias[32:64] of [64]"
  check "--pieces: no metadata blob" [ "$(grep -c '"gshape"' "$RUN_DIR/out")" = 0 ]
  ck="$(ls -d "$WORK"/runs/z3_*)/final_checkpoint"
  run_loom ckpt inspect --pieces "$ck"
  expect_out "--pieces: a ZeRO-3 partition names its elements" ", elements "
fi

# ---- a checkpoint whose marker lists a missing file ------------------------------------------
"$LOOM" train "${MODEL[@]}" training.steps=6 checkpoint.every=2 run.name=dmg --quiet \
  >"$WORK/dmg.log" 2>&1 || { fail "training with checkpoints"; tail -3 "$WORK/dmg.log" >&2; }
run=$(ls -d "$WORK"/runs/dmg_*)
rm "$run/checkpoint_2/model.safetensors"
want="'model.safetensors' is missing (COMPLETE lists it); use '$run/final_checkpoint' (step 6)"
expect_fail "inspect" "$want" "$LOOM" ckpt inspect "$run/checkpoint_2"
expect_fail "inspect --pieces" "$want" "$LOOM" ckpt inspect --pieces "$run/checkpoint_2"
expect_fail "eval" "$want" "$LOOM" eval "$run/checkpoint_2" --data "$WORK/train.bin"
expect_fail "generate" "$want" "$LOOM" generate "$run/checkpoint_2" --prompt-ids 5,6 \
  --max-new-tokens 2
expect_fail "ckpt export" "$want" "$LOOM" ckpt export "$run/checkpoint_2" --out "$WORK/hf"
check "export left nothing" [ ! -e "$WORK/hf" ]
expect_fail "ckpt compare" "$want" "$LOOM" ckpt compare "$run/checkpoint_2" "$run/final_checkpoint"
# a resized file; no complete checkpoint left to suggest
truncate -s -8 "$run/checkpoint_4/optimizer.safetensors"
rm "$run/final_checkpoint/trainer_state.json" "$run/checkpoint_2/COMPLETE"
expect_fail "resized file" "'optimizer.safetensors' has " "$LOOM" ckpt inspect "$run/checkpoint_4"
expect_fail "no complete checkpoint left" "holds no other complete checkpoint" \
  "$LOOM" ckpt inspect "$run/checkpoint_4"
# the intact checkpoints of other runs still read
run_loom ckpt inspect "$one/final_checkpoint"
expect_rc "an intact checkpoint" 0

finish
