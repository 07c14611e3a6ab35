#!/usr/bin/env bash
# Export/import of vision-language checkpoints written by `loom train` itself on synthetic VQA
# data: tiny Qwen2.5-VL from one process, from a 2-rank run whose vision encoder and text
# decoder are split their own ways and from a 3-rank run with the encoder on its own rank
# (checkpoints in rank pieces), and tiny LLaVA. export -> import must give back every tensor
# bitwise (`loom ckpt compare --rtol 0`: any difference fails); a bf16 export within bf16's
# rounding (relative norm <= 2^-8 per tensor, bf16's unit roundoff 3.9e-3, so 4e-3; the norm
# weights near 1 come closest, ~2.6e-3); config.json carries the tokenizer's <|image_pad|> and
# <|vision_start|> ids.
# usage: hf_vlm_train_test.sh LOOM
. "$(dirname "$0")/../train/parallel_common.sh"

{ "$LOOM" data synth-vqa --out "$WORK/vqa" --samples 40 --shard-size 8 &&
  "$LOOM" data prepare "$WORK/vqa" --split 4,1,0; } >"$WORK/synth.log" 2>&1 ||
  { echo "could not make the VQA data"; cat "$WORK/synth.log"; exit 1; }
VLM=(model.preset=tiny-qwen2.5-vl model.vocab_size=384 training.seq_len=48 training.steps=2
  training.warmup_steps=1 training.lr=2e-3 training.micro_batch_size=4 data.format=vqa
  data.vqa_path="$WORK/vqa" data.tokenizer="$WORK/vqa/tokenizer.json"
  data.image_min_pixels=12544 data.image_max_pixels=12544 checkpoint.every=0)

quiet() { "$@" >>"$WORK/commands.log" 2>&1 || { tail -3 "$WORK/commands.log" >&2; return 1; }; }
roundtrip() { # name checkpoint-dir
  local name=$1 ck=$2
  check "$name: export" quiet "$LOOM" ckpt export "$ck" --out "$WORK/$name.hf" --max-shard-size 20KB
  check "$name: sharded" test -f "$WORK/$name.hf/model.safetensors.index.json"
  check "$name: import" quiet "$LOOM" ckpt import "$WORK/$name.hf" --out "$WORK/$name.back"
  check "$name: every tensor bitwise after the round trip" \
    quiet "$LOOM" ckpt compare "$ck" "$WORK/$name.back" --rtol 0
  check "$name: bf16 export" quiet "$LOOM" ckpt export "$ck" --out "$WORK/$name.bf16" --dtype bf16
  check "$name: bf16 import" quiet "$LOOM" ckpt import "$WORK/$name.bf16" --out "$WORK/$name.bf16back"
  check "$name: bf16 within its rounding" \
    quiet "$LOOM" ckpt compare "$ck" "$WORK/$name.bf16back" --rtol 4e-3
  if "$LOOM" ckpt compare "$ck" "$WORK/$name.bf16back" --rtol 0 >/dev/null 2>&1; then
    fail "$name: the bf16 export did not round anything"; else pass; fi
}
token_id() { grep -o "\"$1\": *[0-9]*" "$2" | grep -o '[0-9]*$'; }

train q_single 1 "${VLM[@]}" && roundtrip q_single "$(run_dir q_single)/final_checkpoint"
pad=$(/usr/bin/python3 -c "import json,sys; t=json.load(open(sys.argv[1])); \
print([a['id'] for a in t['added_tokens'] if a['content']=='<|image_pad|>'][0])" "$WORK/vqa/tokenizer.json")
check "config.json image_token_id = <|image_pad|> ($pad)" \
  test "$(token_id image_token_id "$WORK/q_single.hf/config.json")" = "$pad"
check "config.json vision_start_token_id" \
  test "$(token_id vision_start_token_id "$WORK/q_single.hf/config.json")" = "$((pad - 1))"

train q_sp2_tp2 2 "${VLM[@]}" parallel.tp=2 vision.parallel.sp=2 vision.parallel.zero=1 &&
  { ck="$(run_dir q_sp2_tp2)/final_checkpoint"
    check "q_sp2_tp2: checkpoint in rank pieces" test ! -f "$ck/model.safetensors"
    roundtrip q_sp2_tp2 "$ck"; }

# the encoder on a rank of its own after a 2-stage text pipeline (3 ranks, ZeRO-3 on the
# encoder): a third way of writing the pieces
train q_separate_pp2 3 "${VLM[@]}" parallel.pp=2 vision.parallel.placement=separate \
  vision.parallel.zero=3 && roundtrip q_separate_pp2 "$(run_dir q_separate_pp2)/final_checkpoint"

train l_single 1 "${VLM[@]}" model.preset=tiny-llava training.seq_len=96 &&
  roundtrip l_single "$(run_dir l_single)/final_checkpoint"
finish
