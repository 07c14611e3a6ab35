#!/usr/bin/env bash
# `loom generate --image` on tiny vision-language models trained briefly (tiny-qwen2.5-vl with
# window attention, the merger and M-RoPE; tiny-llava with fixed-size images and 1D positions)
# on `loom data synth-vqa` data. For val samples in the training-time evaluation's order,
# gen_vqa_helper gives what that path computes with the training decoder (no cache): the
# prompt ids, the teacher-forced argmax answer (src/train/eval_vqa.c) and the greedy answer.
# loom generate (KV cache, its own prompt building and image preprocessing from the JPEG
# file) must give the same prompt ids and the same answer ids (stop token <|im_end|>
# included), and the teacher-forced answer whenever that one is self-consistent (every
# predicted token equal to the target, as for samples eval_vqa.c counts correct). With
# --ignore-eos the first 6 tokens (past <|im_end|>: text positions after the image, M-RoPE
# deltas) equal the helper's 6-token greedy continuation.
# usage: vlm_answer_test.sh LOOM GEN_VQA_HELPER
. "$(dirname "$0")/../train/common.sh"
HELPER=${2:?usage: $0 loom gen_vqa_helper}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
N=6

"$LOOM" data synth-vqa --out "$WORK/vqa" --samples 600 --shard-size 100 >/dev/null 2>&1 ||
  { fail "synth-vqa"; finish; exit 1; }

vlm_case() { # name steps overrides...
  local name=$1 steps=$2; shift 2
  "$LOOM" train "$ROOT/configs/vqa_demo.yaml" run.output_dir="$WORK/runs_$name" \
    data.vqa_path="$WORK/vqa" data.tokenizer="$WORK/vqa/tokenizer.json" \
    training.steps="$steps" training.log_every=1000 training.eval_every=0 training.eval_batches=0 "$@" --quiet >"$WORK/train_$name.log" 2>&1 ||
    { fail "$name: training"; tail -5 "$WORK/train_$name.log" >&2; return; }
  local ck
  ck=$(ls -d "$WORK"/runs_"$name"/*/final_checkpoint)
  mkdir -p "$WORK/$name"
  "$HELPER" "$ck" val "$WORK/$name" $N >"$WORK/$name/eval.txt" ||
    { fail "$name: gen_vqa_helper"; return; }
  "$HELPER" "$ck" val "$WORK/$name" $N 6 >"$WORK/$name/eval6.txt" ||
    { fail "$name: gen_vqa_helper 6"; return; }
  local i consistent=0
  for ((i = 0; i < N; i++)); do
    "$LOOM" generate "$ck" --image "$WORK/$name/$i.jpg" --prompt "$(cat "$WORK/$name/$i.txt")" \
      --json >"$WORK/$name/gen$i.json" 2>/dev/null || { fail "$name: generate sample $i"; continue; }
    "$LOOM" generate "$ck" --image "$WORK/$name/$i.jpg" --prompt "$(cat "$WORK/$name/$i.txt")" \
      --json --ignore-eos --max-new-tokens 6 >"$WORK/$name/gen6_$i.json" 2>/dev/null ||
      { fail "$name: generate sample $i --ignore-eos"; continue; }
    local verdict
    verdict=$(python3 - "$WORK/$name" "$i" <<'PY'
import json, sys
d, i = sys.argv[1], int(sys.argv[2])
def fields(path):
    line = open(path).read().splitlines()[i].split()
    return {k: [int(x) for x in v.split(",") if x] for k, v in (f.split("=") for f in line[2:])}
ev, ev6 = fields(d + "/eval.txt"), fields(d + "/eval6.txt")
g = json.load(open("%s/gen%d.json" % (d, i)))
g6 = json.load(open("%s/gen6_%d.json" % (d, i)))
im_end = ev["target"][-1]
ids = g["ids"] + ([im_end] if g["stop"] == "eos" else [])
bad = []
if g["prompt_ids"] != ev["prompt"]: bad.append("prompt %s vs %s" % (g["prompt_ids"], ev["prompt"]))
if ids != ev["greedy"]: bad.append("answer %s vs eval-path greedy %s" % (ids, ev["greedy"]))
if g6["ids"] != ev6["greedy"]: bad.append("6 tokens %s vs %s" % (g6["ids"], ev6["greedy"]))
tf_ok = ev["tf"] == ev["target"]
if tf_ok and ids != ev["tf"]: bad.append("answer %s vs teacher-forced %s" % (ids, ev["tf"]))
print(("FAIL " + "; ".join(bad)) if bad else ("ok tf" if tf_ok else "ok"))
PY
)
    case $verdict in
      ok*) pass; [ "$verdict" = "ok tf" ] && consistent=$((consistent + 1)) ;;
      *) fail "$name sample $i: $verdict" ;;
    esac
  done
  echo "$name: $N answers equal to the evaluation path ($consistent answered correctly)"
  check "$name: at least one correctly answered sample compared" [ "$consistent" -ge 1 ]
}

vlm_case qwen 800
vlm_case llava 300 model.preset=tiny-llava training.seq_len=96
finish
