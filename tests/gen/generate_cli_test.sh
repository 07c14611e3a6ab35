#!/usr/bin/env bash
# `loom generate` as a user runs it, on a GPT-2-family model trained a few steps with a
# tokenizer: streamed text equals the --json text; --stop cuts the text before the string;
# a seed reproduces sampled output and another seed changes it; --top-k 1 equals greedy;
# --prompts runs a batch whose rows equal each prompt alone; a checkpoint written in
# tensor-parallel pieces (mpirun, tp=2) generates the same ids as its Hugging Face export;
# the tokens/s line. Bad input: prompt longer than max_seq, --image with a text-only model,
# a missing checkpoint, an unreadable or missing image, an empty prompt, a --prompts file
# without prompts (blank lines are skipped), no tokenizer — each a clear message and a non-zero exit, nothing on stdout.
# usage: generate_cli_test.sh LOOM
. "$(dirname "$0")/../train/common.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
make_data || { fail "could not make test data"; finish; exit 1; }
MODEL=(model.preset= model.arch=gpt2 model.vocab_size=300 model.layers=2 model.hidden=96
  model.heads=3 model.max_seq=40 training.seq_len=32 training.micro_batch_size=2
  training.steps=5 training.warmup_steps=1 training.lr=0.003 model.init_std=0.3 data.train_shards="$WORK/train.bin"
  data.tokenizer="$WORK/tok.json" run.output_dir="$WORK/runs")
"$LOOM" train "${MODEL[@]}" run.name=one --quiet >"$WORK/train.log" 2>&1 ||
  { fail "training"; tail -5 "$WORK/train.log" >&2; finish; exit 1; }
CK=$(ls -d "$WORK"/runs/one_*/final_checkpoint)
G=("$LOOM" generate "$CK")
field() { python3 -c 'import json, sys
for line in sys.stdin: print(json.dumps(json.loads(line)[sys.argv[1]]))' "$1"; }

# streaming text = the text of --json; tokens/s on stderr
"${G[@]}" --prompt "Once upon a time" --max-new-tokens 20 --ignore-eos >"$WORK/s.txt" 2>"$WORK/s.err"
check "streamed run exits 0" [ $? = 0 ]
"${G[@]}" --prompt "Once upon a time" --max-new-tokens 20 --ignore-eos --json >"$WORK/s.json" 2>/dev/null
# (--json holds the text as UTF-8 with ill-formed bytes replaced by U+FFFD, as Python does)
check "streamed text = --json text" python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))["text"]
s = open(sys.argv[2], "rb").read().decode("utf-8", "replace")
sys.exit(s != j + "\n")' "$WORK/s.json" "$WORK/s.txt"
check "20 ids" [ "$(field ids <"$WORK/s.json" | python3 -c 'import json,sys; print(len(json.loads(sys.stdin.read())))')" = 20 ]
check "tokens/s line" grep -Eq "prefill [0-9]+ tokens in .* tokens/s\); decode 19 tokens in .* tokens/s" "$WORK/s.err"

# --stop: the text ends right before the first occurrence of the stop string
# the stop string: 2 ASCII letters/spaces from the middle of the text
stop=$(python3 -c 'import json, sys
t = json.load(open(sys.argv[1]))["text"]
c = [i for i in range(len(t) - 1) if t[i:i+2].isascii() and t[i:i+2].replace(" ", "a").isalpha()]
print(t[c[len(c)//2]:c[len(c)//2]+2] if c else "e")' "$WORK/s.json")
"${G[@]}" --prompt "Once upon a time" --max-new-tokens 20 --ignore-eos --stop "$stop" >"$WORK/stop.txt" 2>/dev/null
check "--stop '$stop': streamed text = the full text cut before it" python3 -c 'import sys
full = open(sys.argv[1], "rb").read()
got = open(sys.argv[2], "rb").read()
stop = sys.argv[3].encode()
sys.exit(got != full[:full.index(stop)] + b"\n")' "$WORK/s.txt" "$WORK/stop.txt" "$stop"
got=$("${G[@]}" --prompt "Once upon a time" --max-new-tokens 20 --ignore-eos --stop "$stop" --json 2>/dev/null | field stop)
check "--stop reported" [ "$got" = '"stop_string"' ]

# sampling: seed reproducible, other seed differs, top-k 1 = greedy
S=(--prompt "The" --max-new-tokens 24 --ignore-eos --temperature 1.0 --json)
a=$("${G[@]}" "${S[@]}" --seed 7 2>/dev/null | field ids)
b=$("${G[@]}" "${S[@]}" --seed 7 2>/dev/null | field ids)
c=$("${G[@]}" "${S[@]}" --seed 8 2>/dev/null | field ids)
check "same seed, same ids" [ -n "$a" ] && [ "$a" = "$b" ]
check "other seed, other ids" [ "$a" != "$c" ]
g=$("${G[@]}" --prompt "The" --max-new-tokens 24 --ignore-eos --json 2>/dev/null | field ids)
k=$("${G[@]}" "${S[@]}" --top-k 1 --seed 3 2>/dev/null | field ids)
check "top-k 1 = greedy" [ -n "$g" ] && [ "$g" = "$k" ]

# --dtype bf16 runs (its ids may differ from fp32: other rounding)
n=$("${G[@]}" --prompt "The" --max-new-tokens 12 --ignore-eos --dtype bf16 --json 2>/dev/null | field ids | python3 -c 'import json,sys; print(len(json.loads(sys.stdin.read())))')
check "--dtype bf16: 12 ids" [ "$n" = 12 ]

# --prompts: a batch; each row equals its prompt alone
printf 'Once upon a time\nThe dog\nShe said that the little bird was\n' >"$WORK/p.txt"
"${G[@]}" --prompts "$WORK/p.txt" --max-new-tokens 12 --ignore-eos --json >"$WORK/batch.json" 2>/dev/null
check "--prompts: 3 rows" [ "$(wc -l <"$WORK/batch.json")" = 3 ]
i=0
while IFS= read -r p; do
  alone=$("${G[@]}" --prompt "$p" --max-new-tokens 12 --ignore-eos --json 2>/dev/null | field ids)
  row=$(sed -n "$((i + 1))p" "$WORK/batch.json" | field ids)
  check "--prompts row $i = alone" [ -n "$row" ] && [ "$row" = "$alone" ]
  i=$((i + 1))
done <"$WORK/p.txt"
out=$("${G[@]}" --prompts "$WORK/p.txt" --max-new-tokens 4 2>/dev/null)
check "--prompts text output: one '[N] ' line per prompt" [ "$(grep -c '^\[[123]\] ' <<<"$out")" = 3 ]
# blank lines (between prompts, at the end, whitespace only) are skipped: the same batch
printf '\nOnce upon a time\n\n   \nThe dog\r\n\nShe said that the little bird was\n\n\n' >"$WORK/gaps.txt"
"${G[@]}" --prompts "$WORK/gaps.txt" --max-new-tokens 12 --ignore-eos --json >"$WORK/gaps.json" 2>/dev/null
check "--prompts with blank lines: the same 3 rows" cmp -s "$WORK/batch.json" "$WORK/gaps.json"

# a checkpoint in tensor-parallel pieces generates what its HF export generates
if command -v mpirun >/dev/null; then
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 timeout 120 mpirun -x ASAN_OPTIONS \
    --oversubscribe --bind-to none -np 2 "$LOOM" train "${MODEL[@]}" model.heads=4 parallel.tp=2 run.name=tp2 \
    --quiet >"$WORK/tp2.log" 2>&1 || { fail "tensor-parallel training"; tail -5 "$WORK/tp2.log" >&2; }
  ck2=$(ls -d "$WORK"/runs/tp2_*/final_checkpoint)
  check "tp2 checkpoint in pieces" test -f "$ck2/model-r00001.safetensors"
  "$LOOM" ckpt export "$ck2" --out "$WORK/tp2.hf" >/dev/null 2>&1
  a=$("$LOOM" generate "$ck2" --prompt-ids 5,17,250,3 --max-new-tokens 16 --ignore-eos --json 2>/dev/null | field ids)
  b=$("$LOOM" generate "$WORK/tp2.hf" --prompt-ids 5,17,250,3 --max-new-tokens 16 --ignore-eos --json 2>/dev/null | field ids)
  check "tp2 pieces = HF export ($a)" [ -n "$a" ] && [ "$a" = "$b" ]
else
  echo "mpirun not found: multi-rank checkpoint case skipped"
fi

# bad input: message on stderr, exit 1, nothing on stdout
bad() { # bad "what" "expected message part" args...
  local what=$1 msg=$2; shift 2
  run_loom generate "$@"
  expect_rc "$what: exit 1" 1
  expect_err "$what: message" "$msg"
  check "$what: nothing on stdout" [ ! -s "$RUN_DIR/out" ]
}
long=$(python3 -c 'print(",".join(["7"] * 40))')
bad "prompt of 40 tokens, max_seq 40" "prompt 1 has 40 tokens but the model's max_seq is 40" \
  "$CK" --prompt-ids "$long"
longtext=$(python3 -c 'print("the cat sat on the mat " * 30)')
bad "long text prompt" "but the model's max_seq is 40: at most 39 prompt tokens" "$CK" --prompt "$longtext"
printf 'not a jpeg' >"$WORK/x.jpg"
bad "--image with a text-only model" "is a text-only model" "$CK" --image "$WORK/x.jpg" --prompt "What?"
bad "missing checkpoint" "checkpoint '$WORK/nope' does not exist" "$WORK/nope" --prompt "Hi"
bad "not a checkpoint" "holds neither config.yaml" "$WORK" --prompt "Hi"
bad "empty prompt" "the prompt is empty" "$CK" --prompt ""
printf '\n\n  \n' >"$WORK/blank.txt"
bad "only blank lines in --prompts" "holds no prompts (its 3 lines are blank)" "$CK" --prompts "$WORK/blank.txt"
: >"$WORK/empty.txt"
bad "empty --prompts file" "the file is empty" "$CK" --prompts "$WORK/empty.txt"
bad "missing --prompts file" "$WORK/none.txt" "$CK" --prompts "$WORK/none.txt"
sed "s|tokenizer: .*|tokenizer: $WORK/gone.json|" "$CK/config.yaml" >"$WORK/cfg.yaml"
mkdir -p "$WORK/notok" && cp "$CK/model.safetensors" "$WORK/notok/" && cp "$WORK/cfg.yaml" "$WORK/notok/config.yaml"
bad "tokenizer file gone" "data.tokenizer of $WORK/notok/config.yaml is '$WORK/gone.json', which does not exist" \
  "$WORK/notok" --prompt "Hi"
bad "no tokenizer, --stop with ids" "no tokenizer" "$WORK/notok" --prompt-ids 5,6 --stop x
bad "bad --top-p" "--top-p must be a number" "$CK" --prompt "Hi" --top-p 1.5
bad "bad --dtype" "--dtype must be fp32 or bf16, not 'fp16'" "$CK" --prompt "Hi" --dtype fp16
bad "bad token id" "is not a token id in [0, 300)" "$CK" --prompt-ids 5,300

# the VLM cases of bad input
"$LOOM" data synth-vqa --out "$WORK/vqa" --samples 100 --shard-size 50 >/dev/null 2>&1
"$LOOM" train "$(dirname "$0")/../../configs/vqa_demo.yaml" run.output_dir="$WORK/runs_vqa" \
  data.vqa_path="$WORK/vqa" data.tokenizer="$WORK/vqa/tokenizer.json" training.steps=2 \
  training.micro_batch_size=2 training.eval_every=0 training.eval_batches=0 --quiet >"$WORK/vqa.log" 2>&1 || fail "vlm training"
vck=$(ls -d "$WORK"/runs_vqa/*/final_checkpoint)
bad "unreadable image" "x.jpg" "$vck" --image "$WORK/x.jpg" --prompt "What colour is the circle?"
bad "missing image" "$WORK/none.jpg" "$vck" --image "$WORK/none.jpg" --prompt "What colour?"
bad "--image without a question" "--image needs the question" "$vck" --image "$WORK/x.jpg"
finish
