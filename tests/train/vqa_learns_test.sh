#!/bin/bash
# The synthetic VQA demo learns: tiny-qwen2.5-vl trained briefly with configs/vqa_demo.yaml
# on `loom data synth-vqa` data answers the val questions far above the majority-answer
# baseline that synth-vqa computes from the data, and the same training on the same
# questions with blank images (--blank-images) stays near the question-only prior, so the
# accuracy comes from the images. Every threshold is relative to numbers read from the data.
. "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STEPS=${VQA_TEST_STEPS:-1500}

synth() { # synth NAME [options]: 8000 samples, 10 shards (9 train, 1 val)
  local name=$1; shift
  "$LOOM" data synth-vqa --out "$WORK/$name" --samples 8000 --shard-size 800 "$@" \
    > "$WORK/synth_$name.log" 2>&1
}
train() { # train NAME: the demo config on $WORK/NAME, STEPS steps
  "$LOOM" train "$ROOT/configs/vqa_demo.yaml" run.output_dir="$WORK/runs_$1" \
    data.vqa_path="$WORK/$1" data.tokenizer="$WORK/$1/tokenizer.json" \
    training.steps="$STEPS" training.log_every=400 checkpoint.save_final=false \
    > "$WORK/train_$1.log" 2>&1 || { tail -20 "$WORK/train_$1.log" >&2; return 1; }
}
json() { # json FILE KEY [KEY...]: a number from a JSON file
  python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]: v = v[k]
print(v)' "$@"
}
at_least() { # at_least A B [C]: A >= B + C (C default 0)
  python3 -c 'import sys; a, b, c = map(float, sys.argv[1:4]); sys.exit(a < b + c)' \
    "$1" "$2" "${3:-0}"
}

check "synth-vqa images" synth images
check "synth-vqa blank" synth blank --blank-images
check "blank set: same questions and answers" \
  cmp -s <(tar -xOf "$WORK/images/000003.tar" --wildcards '*.json') \
         <(tar -xOf "$WORK/blank/000003.tar" --wildcards '*.json')
check "train on images" train images
check "train on blank images" train blank
run_images=$(ls -d "$WORK"/runs_images/*/ 2>/dev/null | head -1)
run_blank=$(ls -d "$WORK"/runs_blank/*/ 2>/dev/null | head -1)
acc=$(json "$run_images/summary.json" val_accuracy 2>/dev/null || echo -1)
acc_blank=$(json "$run_blank/summary.json" val_accuracy 2>/dev/null || echo -1)
base=$(json "$WORK/images/synth_vqa.json" baseline_val overall)
prior=$(json "$WORK/images/synth_vqa.json" question_prior_val overall)
chance=$(python3 -c "print(max($base, $prior))")
echo "val answer accuracy after $STEPS steps: $acc with images, $acc_blank with blank images;" \
     "majority-answer baseline $base, question-only prior $prior"
grep -h "answer accuracy by question type" "$WORK/train_images.log" "$WORK/train_blank.log"

check "per-type accuracy printed" grep -q "answer accuracy by question type (majority baseline)" \
  "$WORK/train_images.log"
check "accuracy $acc >= 2 x majority baseline $base" \
  at_least "$acc" "$(python3 -c "print(2 * $base)")"
check "accuracy $acc >= majority baseline $base + 0.25" at_least "$acc" "$base" 0.25
check "blank-image accuracy $acc_blank near the prior (<= $chance + 0.05)" \
  at_least "$chance" "$acc_blank" -0.05
check "images add >= 0.25 over blank images ($acc vs $acc_blank)" at_least "$acc" "$acc_blank" 0.25
# the validation loss (answer tokens of the val split, every 500 steps) tells the same story
vl=$(json "$run_images/summary.json" final_valid_loss 2>/dev/null || echo 99)
vl_blank=$(json "$run_blank/summary.json" final_valid_loss 2>/dev/null || echo -99)
vl_first=$(sed -n 's/^{"step": 500, "val_loss": \([^,]*\),.*/\1/p' "$run_images/metrics.jsonl")
echo "val loss after $STEPS steps: $vl with images (${vl_first:-none} at step 500), $vl_blank with blank images"
check "val loss with images $vl below blank images $vl_blank by >= 0.1" at_least "$vl_blank" "$vl" 0.1
check "val loss fell from step 500 (${vl_first:-none}) to the end ($vl)" at_least "${vl_first:-0}" "$vl" 0
finish
