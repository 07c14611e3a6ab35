#!/usr/bin/env bash
# Validation loss and perplexity of a training run, and `loom eval`:
#  - evaluation does not change training: with validation every 5 steps, the per-step losses
#    and gradient norms are bitwise those of the same run without validation data (one
#    process, 2-rank ZeRO-3 and a 2-stage 1F1B pipeline);
#  - the figures reach train.log, metrics.jsonl (a line per evaluation at its step),
#    summary.json (final_valid_loss = the last evaluation, min_valid_loss = the lowest,
#    perplexity = exp) and the run registry's columns;
#  - a run stopped and resumed evaluates exactly as the uninterrupted one;
#  - every evaluation scores the same tokens: the end-of-run val loss equals, digit for digit,
#    `loom eval` of the final checkpoint in the same layout;
#  - data.val_fraction holds out exactly the tail: training on it equals training on a shard
#    of the head with data.val_shards = a shard of the tail (losses and val losses bitwise);
#  - vqa data: the val split of data.vqa_path, or data.val_shards naming a dataset;
#  - training.steps=0 scores the initial weights (loss ~ ln(vocab) for N(0, 0.02) weights);
#  - bad input: missing val shards, eval_batches beyond the data, evaluation asked for with
#    no validation data, both val keys, val_fraction with vqa data, `loom eval` of a missing
#    path or of a directory that is not a checkpoint: a clear error, non-zero exit and no run
#    directory.
. "$(dirname "$0")/common.sh"
PY=${LOOM_PYTHON:-/usr/bin/python3}
make_data || { echo "could not make test data"; exit 1; }
"$LOOM" data synth-text --out "$WORK/val.txt" --bytes 20000 --seed 11 >/dev/null &&
  "$LOOM" data tokenize --tokenizer "$WORK/tok.json" --out "$WORK/val.bin" "$WORK/val.txt" >/dev/null ||
  { echo "could not make validation data"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
RUNS="$WORK/runs"
base=(run.output_dir="$RUNS" model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2
  model.hidden=64 model.intermediate=128 training.steps=10 training.seq_len=32
  training.micro_batch_size=4 training.grad_accum=2 training.warmup_steps=2
  data.train_shards="$WORK/train.bin")
run_dir() { ls -d "$RUNS/$1"_* | head -1; }
train() { # name [--nproc N] overrides...
  local name=$1; shift
  "$LOOM" train "${base[@]}" run.name="$name" "$@" --quiet >"$WORK/$name.log" 2>&1 ||
    { fail "$name: training failed: $(tail -3 "$WORK/$name.log")"; return 1; }
}
steps_of() { sed -n 's/.*"loss": \([^,]*\), "lr": [^,]*, "grad_norm": \([^,]*\),.*/\1 \2/p' "$(run_dir "$1")/metrics.jsonl"; }
vals_of() { sed -n 's/^{"step": \([0-9]*\), "val_loss": \([^,]*\),.*/\1 \2/p' "$(run_dir "$1")/metrics.jsonl"; }
json_field() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1" | head -1; }

echo "evaluation leaves training bitwise unchanged"
for layout in "single" "zero3 --nproc 2 parallel.dp=2 parallel.zero=3 training.micro_batch_size=2" \
              "pp2 --nproc 2 parallel.pp=2"; do
  set -- $layout
  name=$1; shift
  train "plain_$name" "$@" && train "eval_$name" "$@" data.val_shards="$WORK/val.bin" \
    training.eval_every=5 training.eval_batches=3 || continue
  check "$name: 10 steps" test "$(steps_of "plain_$name" | wc -l)" = 10
  check "$name: losses and grad norms bitwise equal with eval_every=5" \
    test "$(steps_of "plain_$name")" = "$(steps_of "eval_$name")"
  check "$name: evaluations at steps 5 and 10" test "$(vals_of "eval_$name" | cut -d' ' -f1 | tr '\n' ' ')" = "5 10 "
  check "$name: no validation without validation data" test -z "$(vals_of "plain_$name")"
done
echo "  single: $(vals_of eval_single | tr '\n' ';')"
check "the layouts' val losses agree (1e-5 relative)" awk -v a="$(vals_of eval_single | tail -1 | cut -d' ' -f2)" \
  -v b="$(vals_of eval_zero3 | tail -1 | cut -d' ' -f2)" -v c="$(vals_of eval_pp2 | tail -1 | cut -d' ' -f2)" \
  'BEGIN { d1 = (a - b) / a; d2 = (a - c) / a; if (d1 < 0) d1 = -d1; if (d2 < 0) d2 = -d2; exit !(d1 <= 1e-5 && d2 <= 1e-5) }'

echo "where the figures go"
d=$(run_dir eval_single)
last=$(vals_of eval_single | tail -1 | cut -d' ' -f2)
first=$(vals_of eval_single | head -1 | cut -d' ' -f2)
check "summary.json final_valid_loss = the last evaluation" test "$(json_field "$d/summary.json" final_valid_loss)" = "$last"
check "summary.json min_valid_loss = the lower evaluation" test "$(json_field "$d/summary.json" min_valid_loss)" = \
  "$(printf '%s\n%s\n' "$first" "$last" | sort -g | head -1)"
ppl=$(json_field "$d/summary.json" final_valid_perplexity)
check "final_valid_perplexity = exp(final_valid_loss)" awk -v l="$last" -v p="$ppl" 'BEGIN { r = (exp(l) - p) / p; exit !(r < 1e-12 && r > -1e-12) }'
check "metrics.jsonl val line has perplexity and tokens (3 batches x 8 x 32 = 768)" \
  grep -q "\"step\": 10, \"val_loss\": $last, \"val_perplexity\": [0-9.e+-]*, \"val_tokens\": 768," "$d/metrics.jsonl"
check "train.log has the val loss line" grep -q "step 10: val loss $(printf '%.6f' "$last"), perplexity" "$d/train.log"
check "train.log: the step lines after an evaluation show its val loss" \
  grep -q "step 10/10 | loss [0-9.]* | val loss $(printf '%.4f' "$first") | lr" "$d/train.log"
check "train.log names the validation data" grep -q "validation: $WORK/val.bin, [0-9]* tokens; 3 batches of 8 x 32 tokens" "$d/train.log"
reg=$("$LOOM" runs --runs-dir "$RUNS" --filter "name = 'eval_single'" --show final_valid_loss,final_valid_perplexity,min_valid_loss --format csv)
row=$(echo "$reg" | tail -1)
check "registry columns final_valid_loss, final_valid_perplexity, min_valid_loss" \
  awk -F, -v l="$last" -v p="$ppl" -v row="$row" 'BEGIN { split(row, f, ","); exit !(f[1] == l && f[2] == p && f[3] + 0 > 0) }'
echo "  registry: $(echo "$reg" | tr '\n' ' ')"
reg_plain=$("$LOOM" runs --runs-dir "$RUNS" --filter "name = 'plain_single'" --show final_valid_loss --format csv | tail -1)
check "registry: a run without validation data has an empty final_valid_loss" test -z "$reg_plain"

echo "loom eval scores the same tokens as the run's evaluations"
got=$("$LOOM" eval "$d/final_checkpoint" --json)
check "loom eval = the run's final val loss, every digit" test "$(echo "$got" | sed -n 's/.*"val_loss": \([^,]*\),.*/\1/p')" = "$last"
check "loom eval counts 768 tokens" grep -q '"tokens": 768,' <<<"$got"
got2=$("$LOOM" eval "$d/final_checkpoint" --batches 1 --data "$WORK/val.bin")
check "loom eval text output (--batches 1: 256 tokens)" grep -q "^tokens: 256$" <<<"$got2"
zero3=$("$LOOM" eval "$(run_dir eval_zero3)/final_checkpoint" --json parallel.dp=1 parallel.zero=0 training.micro_batch_size=4)
check "loom eval of a 2-rank ZeRO-3 checkpoint in one process = the run's val loss (1e-5)" \
  awk -v a="$(echo "$zero3" | sed -n 's/.*"val_loss": \([^,]*\),.*/\1/p')" -v b="$(vals_of eval_zero3 | tail -1 | cut -d' ' -f2)" \
  'BEGIN { r = (a - b) / b; if (r < 0) r = -r; exit !(r <= 1e-5) }'

echo "a resumed run evaluates as the uninterrupted one"
train resumed data.val_shards="$WORK/val.bin" training.eval_every=5 training.eval_batches=3 \
  checkpoint.every=6 --stop-after 7 && cp -r "$(run_dir resumed)" "$WORK/edited_run" &&
  "$LOOM" train --resume "$(run_dir resumed)/checkpoint_6" --quiet >"$WORK/resume.log" 2>&1 ||
  fail "resume with evaluation failed: $(tail -2 "$WORK/resume.log")"
# the evaluation at step 5 (before the checkpoint) is only in metrics.jsonl: set it to 0.25 in
# a copy of the stopped run, resume the copy, and its min_valid_loss must be that 0.25
sed -i 's/^{"step": 5, "val_loss": [^,]*,/{"step": 5, "val_loss": 0.25,/' "$WORK/edited_run/metrics.jsonl"
"$LOOM" train --resume "$WORK/edited_run/checkpoint_6" --quiet >"$WORK/resume2.log" 2>&1 ||
  fail "resume of the edited copy failed: $(tail -2 "$WORK/resume2.log")"
check "resumed: min_valid_loss takes the evaluations in metrics.jsonl before the checkpoint" \
  test "$(json_field "$WORK/edited_run/summary.json" min_valid_loss)" = 0.25
check "resumed: losses and val losses bitwise those of the uninterrupted run" \
  test "$(steps_of resumed; vals_of resumed)" = "$(steps_of eval_single; vals_of eval_single)"
check "resumed: min_valid_loss over the evaluations before and after the resume" \
  test "$(json_field "$(run_dir resumed)/summary.json" min_valid_loss)" = "$(json_field "$d/summary.json" min_valid_loss)"

echo "data.val_fraction holds out exactly the tail"
"$PY" - "$WORK/train.bin" "$WORK/head.bin" "$WORK/tail.bin" 0.1 <<'PYEOF' || fail "could not split the shard"
import sys
src, head, tail, frac = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
raw = open(src, "rb").read()
hdr, body = raw[:64], raw[64:]
w = 2 if int.from_bytes(hdr[12:16], "little") == 1 else 4
n = int.from_bytes(hdr[16:24], "little")
k = int(n * frac)  # floor(N * fraction): the held-out tail
def write(path, tokens):
    h = bytearray(hdr)
    h[16:24] = (len(tokens) // w).to_bytes(8, "little")
    open(path, "wb").write(bytes(h) + tokens)
write(head, body[: (n - k) * w])
write(tail, body[(n - k) * w:])
PYEOF
train frac data.val_fraction=0.1 training.eval_every=5 training.eval_batches=2
train split data.train_shards="$WORK/head.bin" data.val_shards="$WORK/tail.bin" training.eval_every=5 training.eval_batches=2
check "val_fraction: training losses = training on the head alone" test "$(steps_of frac)" = "$(steps_of split)"
check "val_fraction: val losses = scoring the tail alone" test "$(vals_of frac)" = "$(vals_of split)"
check "val_fraction: the data line says the tail is held out" grep -q "(without the held-out tail)" "$(run_dir frac)/train.log"

echo "training.steps=0 scores the initial weights"
train zero training.steps=0 data.val_shards="$WORK/val.bin"
z=$(run_dir zero)
check "steps=0: summary steps 0, no final_loss (no step ran)" bash -c "grep -q '\"steps\": 0,' '$z/summary.json' && ! grep -q '\"final_loss\"' '$z/summary.json'"
zl=$(json_field "$z/summary.json" final_valid_loss)
echo "  initial val loss $zl (ln 300 = 5.7038)"
check "steps=0: initial val loss within 0.05 of ln(300)" awk -v l="$zl" 'BEGIN { d = l - log(300); if (d < 0) d = -d; exit !(d < 0.05) }'
check "steps=0: loom eval of its checkpoint agrees" test "$("$LOOM" eval "$z/final_checkpoint" --json | sed -n 's/.*"val_loss": \([^,]*\),.*/\1/p')" = "$zl"

echo "vision-language data: the val split of data.vqa_path, or data.val_shards"
{ "$LOOM" data synth-vqa --out "$WORK/vqa" --samples 104 --shard-size 8 &&
  "$LOOM" data prepare "$WORK/vqa" --split 12,1,0; } >"$WORK/vqa.log" 2>&1 || fail "could not make vqa data"
VQA=(model.preset=tiny-qwen2.5-vl model.vocab_size=384 training.seq_len=48 training.steps=2
  training.micro_batch_size=4 training.grad_accum=2 training.warmup_steps=1 data.format=vqa
  data.vqa_path="$WORK/vqa" data.tokenizer="$WORK/vqa/tokenizer.json" data.image_min_pixels=12544
  data.image_max_pixels=12544 data.val_fraction=0 training.eval_every=1)
train vqa_split "${VQA[@]}"
train vqa_shards "${VQA[@]}" data.val_shards="$WORK/vqa"
check "vqa: evaluations at steps 1 and 2" test "$(vals_of vqa_split | cut -d' ' -f1 | tr '\n' ' ')" = "1 2 "
check "vqa: data.val_shards naming the same dataset scores its val split identically" \
  test "$(vals_of vqa_split)" = "$(vals_of vqa_shards)"
check "vqa: the validation line names the val split (8 samples)" grep -q "validation: $WORK/vqa (val), 8 samples" "$(run_dir vqa_split)/train.log"
vq=$("$LOOM" eval "$(run_dir vqa_split)/final_checkpoint" --json | sed -n 's/.*"val_loss": \([^,]*\),.*/\1/p')
check "vqa: loom eval = the run's last val loss" test "$vq" = "$(vals_of vqa_split | tail -1 | cut -d' ' -f2)"

# token mean over batches, not a mean of batch means: at seq_len 32 some answers are cut, so
# samples have 0..2 targets; 8 batches of one sample must score as one batch of 8 samples
vc="$(run_dir vqa_split)/final_checkpoint"
one=$("$LOOM" eval "$vc" --json training.seq_len=32 training.micro_batch_size=8 training.grad_accum=1)
cum=""
for k in 1 2 3 4 5 6 7 8; do
  cum="$cum $("$LOOM" eval "$vc" --json training.seq_len=32 training.micro_batch_size=1 \
    training.grad_accum=1 --batches $k | sed 's/.*"val_loss": \([^,]*\),.*"tokens": \([0-9]*\),.*/\1:\2/')"
done
echo "  one batch of 8: $(echo "$one" | sed 's/.*"val_loss": \([^,]*\),.*"tokens": \([0-9]*\),.*/\1:\2/'); first k of 8 batches of 1:$cum"
check "vqa: 8 batches of 1 sample = 1 batch of 8 (token mean, 1e-6), and a mean of batch means would differ" \
  awk -v one="$(echo "$one" | sed 's/.*"val_loss": \([^,]*\),.*"tokens": \([0-9]*\),.*/\1 \2/')" -v cum="$cum" 'BEGIN {
    split(one, o, " "); n = split(cum, c, " "); ps = 0; pn = 0; means = 0; batches = 0; counts = ""
    for (k = 1; k <= n; k++) { split(c[k], f, ":"); s = f[1] * f[2] - ps; t = f[2] - pn; ps = f[1] * f[2]; pn = f[2]
      counts = counts " " t; if (t > 0) { means += s / t; batches++ } }
    L = c[n]; split(L, f, ":"); r = (f[1] - o[1]) / o[1]; if (r < 0) r = -r
    m = means / batches; d = (m - o[1]) / o[1]; if (d < 0) d = -d
    printf "  targets per sample:%s; token mean rel diff %.1e; mean of batch means would be off by %.1e\n", counts, r, d
    exit !(r <= 1e-6 && f[2] == o[2] && d > 1e-4) }'
cp -r "$WORK/vqa" "$WORK/vqa_noval" && "$LOOM" data prepare "$WORK/vqa_noval" --split 1,0,0 >/dev/null 2>&1 ||
  fail "could not re-split the vqa data"
train vqa_noval "${VQA[@]}" data.vqa_path="$WORK/vqa_noval" training.eval_every=0
check "vqa: an empty val split, no evaluation asked for: trains, no val lines" \
  test "$(steps_of vqa_noval | wc -l)" = 2 -a -z "$(vals_of vqa_noval)"
order=$("$LOOM" runs --runs-dir "$RUNS" --filter "name = 'zero' OR name = 'eval_single' OR name = 'plain_single'" \
  --sort-by final_valid_loss --show name --format csv | tail -n +2 | tr '\n' ' ')
check "registry: sorted by final_valid_loss (trained, initial weights, none last)" \
  test "$order" = "eval_single zero plain_single "

echo "bad input"
BAD="$WORK/bad_runs"
# expect_fail WHAT EXPECTED-SUBSTRING command...: tests/loom.sh
bad=("${base[@]}" run.output_dir="$BAD")
expect_fail "missing val shards" "data.val_shards: $WORK/none.bin: no token shard matches" \
  "$LOOM" train "${bad[@]}" data.val_shards="$WORK/none.bin"
expect_fail "eval_batches beyond the data" "training.eval_batches = 1000 but the validation data" \
  "$LOOM" train "${bad[@]}" data.val_shards="$WORK/val.bin" training.eval_batches=1000
expect_fail "eval_every without validation data" "there is no validation data; set data.val_shards" \
  "$LOOM" train "${bad[@]}" training.eval_every=5
expect_fail "val_shards and val_fraction" "are both set" \
  "$LOOM" train "${bad[@]}" data.val_shards="$WORK/val.bin" data.val_fraction=0.1
expect_fail "val_fraction out of range" "data.val_fraction = 1.0 is out of range" \
  "$LOOM" train "${bad[@]}" data.val_fraction=1
expect_fail "negative eval_every" "training.eval_every = -1 is out of range" \
  "$LOOM" train "${bad[@]}" training.eval_every=-1
expect_fail "val_fraction with vqa data" "data.val_fraction holds out a fraction of token shards" \
  "$LOOM" train "${bad[@]}" data.format=vqa data.vqa_path="$WORK" model.preset=tiny-qwen2.5-vl data.val_fraction=0.1
expect_fail "vqa: evaluation asked for on an empty val split" "split 'val' of $WORK/vqa_noval holds no samples" \
  "$LOOM" train "${VQA[@]}" run.output_dir="$BAD" data.vqa_path="$WORK/vqa_noval"
expect_fail "vqa: training on the val split cannot validate on it" "data.split is val" \
  "$LOOM" train "${VQA[@]}" run.output_dir="$BAD" data.split=val
check "bad validation setups: no run directory left behind" test ! -e "$BAD"
# a corrupt JPEG in the val split, read by one of two data-parallel ranks: every rank stops at
# that batch (no hang in the next collective) and the error names the shard and sample
"$LOOM" data synth-vqa --out "$WORK/vqabad" --samples 40 --shard-size 20 >/dev/null 2>&1
"$PY" - "$WORK/vqabad/000001.tar" <<'PYEOF' || fail "could not corrupt the val shard"
import io, sys, tarfile
path = sys.argv[1]
with tarfile.open(path) as t:
    members = [(m, t.extractfile(m).read()) for m in t.getmembers()]
done = False
with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
    for m, data in members:
        if m.name.endswith(".jpg") and not done:
            data, done = data[: len(data) // 3], True
        m.size = len(data)
        t.addfile(m, io.BytesIO(data))
PYEOF
"$LOOM" data prepare "$WORK/vqabad" --split 1,1,0 >/dev/null 2>&1
bad_sample=$(tar tf "$WORK/vqabad/000001.tar" | grep -m1 '\.jpg$' | sed 's/\.jpg$//')
out=$(timeout 120 "$LOOM" train "${VQA[@]}" run.output_dir="$BAD/vqabad" data.vqa_path="$WORK/vqabad" \
  data.tokenizer="$WORK/vqabad/tokenizer.json" training.micro_batch_size=2 training.grad_accum=1 \
  training.steps=1 parallel.dp=2 --nproc 2 --quiet 2>&1); rc=$?
check "corrupt val sample on one of 2 ranks: non-zero exit, no hang (rc $rc)" test "$rc" != 0 -a "$rc" != 124
check "corrupt val sample: the error names the validation, shard and sample" \
  grep -q "validation at step 1: .*000001.tar, sample $bad_sample" <<<"$out"
echo "  $(grep -m1 "validation at step" <<<"$out")"
expect_fail "loom eval of a missing checkpoint" "checkpoint '$WORK/nope' does not exist" "$LOOM" eval "$WORK/nope"
expect_fail "loom eval of a directory that is not a checkpoint" "neither config.yaml" "$LOOM" eval "$WORK"
expect_fail "loom eval without validation data" "no validation data: give --data" \
  "$LOOM" eval "$(run_dir plain_single)/final_checkpoint"
expect_fail "loom eval with missing --data" "no token shard matches" "$LOOM" eval "$d/final_checkpoint" --data "$WORK/none.bin"
expect_fail "loom eval --batches beyond the data" "training.eval_batches = 999" "$LOOM" eval "$d/final_checkpoint" --batches 999
# (without parallel.* a multi-rank checkpoint is evaluated in one process: tests/e2e/eval_any_layout_test.sh)
expect_fail "loom eval of a 2-rank layout given in one process" "give --nproc 2, or evaluate in one process with" \
  "$LOOM" eval "$(run_dir eval_zero3)/final_checkpoint" parallel.dp=2
expect_fail "loom eval --batches not a number" "not a count" "$LOOM" eval "$d/final_checkpoint" --batches x
finish
