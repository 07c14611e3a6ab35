#!/usr/bin/env bash
# Bad input gives a clear error (what, where, what to do), a non-zero exit, and no partial
# files: unknown config key, inconsistent dims, missing and truncated token shards, a corrupt
# safetensors header on resume, a tokenizer.json of the wrong type, vision-language setups that
# cannot run.
. "$(dirname "$0")/common.sh"
make_data || { echo "could not make test data"; exit 1; }
RUNS="$WORK/runs"
base=(run.output_dir="$RUNS" model.vocab_size=300 training.steps=2 training.seq_len=16
  training.micro_batch_size=2 data.train_shards="$WORK/train.bin")

# expect_fail WHAT EXPECTED-SUBSTRING command...: tests/loom.sh
no_runs() { check "$1: no run directory left behind" test ! -e "$RUNS" -o -z "$(ls -A "$RUNS" 2>/dev/null)"; }

printf 'training:\n  steps: 2\n  lrr: 0.1\n' > "$WORK/bad_key.yaml"
expect_fail "unknown key" "did you mean 'training.lr'" "$LOOM" train "$WORK/bad_key.yaml" "${base[@]}"
expect_fail "unknown key names file and line" "bad_key.yaml:3" "$LOOM" train "$WORK/bad_key.yaml" "${base[@]}"
no_runs "unknown key"
expect_fail "unknown override" "training.lrr" "$LOOM" train "${base[@]}" training.lrr=1
expect_fail "heads not dividing hidden" "model.heads (3) does not divide model.hidden (128)" \
  "$LOOM" train "${base[@]}" model.heads=3
no_runs "inconsistent dims"
expect_fail "missing shard" "$WORK/nope.bin" "$LOOM" train "${base[@]}" data.train_shards="$WORK/nope.bin"
head -c 1000 "$WORK/train.bin" > "$WORK/short.bin"
expect_fail "truncated shard" "truncated" "$LOOM" train "${base[@]}" data.train_shards="$WORK/short.bin"
no_runs "bad shards"
expect_fail "vocab too small for the data" "model.vocab_size" "$LOOM" train "${base[@]}" model.vocab_size=100
no_runs "vocab mismatch"

# a corrupt safetensors header in the checkpoint to resume from
"$LOOM" train "${base[@]}" checkpoint.every=1 --quiet >/dev/null || fail "setup run failed"
ck=$(ls -d "$RUNS"/*/checkpoint_1)
printf '\xff\xff\xff\xff\xff\xff\x00\x00' | dd of="$ck/model.safetensors" conv=notrunc 2>/dev/null
expect_fail "corrupt safetensors header" "model.safetensors" "$LOOM" train --resume "$ck"
expect_fail "inspect corrupt safetensors" "model.safetensors" "$LOOM" ckpt inspect "$ck/model.safetensors"
expect_fail "resume from a missing directory" "not a directory" "$LOOM" train "${base[@]}" --resume "$WORK/none"

# a tokenizer.json of the wrong type
printf '{"model": {"type": "WordPiece", "vocab": {"a": 0}}}' > "$WORK/wp.json"
expect_fail "wrong tokenizer type" "WordPiece" "$LOOM" data tokenize --tokenizer "$WORK/wp.json" \
  --out "$WORK/out.bin" "$WORK/corpus.txt"
check "wrong tokenizer: no output file" test ! -e "$WORK/out.bin"
# vision-language: images whose tokens do not fit the sequence, vision.parallel on a text-only model
"$LOOM" data synth-vqa --out "$WORK/vqa" --samples 40 --shard-size 20 >/dev/null 2>&1
vqa=(run.output_dir="$WORK/runs_vlm" training.steps=1 training.micro_batch_size=2 training.seq_len=96
  data.format=vqa data.vqa_path="$WORK/vqa" data.tokenizer="$WORK/vqa/tokenizer.json"
  model.vocab_size=384)
expect_fail "VQA images that do not fit seq_len" "64 vision tokens), more than seq_len 24: raise training.seq_len (the encoder takes fixed-size images)" \
  "$LOOM" train "${vqa[@]}" model.preset=tiny-llava training.seq_len=24
rm -rf "$WORK/runs_vlm" # a data error found while training leaves its (failed) run directory
expect_fail "vision.parallel on a text-only model" "vision.parallel.* is set but model 'tiny-gpt2' has no vision encoder" \
  "$LOOM" train "${base[@]}" vision.parallel.sp=2 run.output_dir="$WORK/runs_vlm"
check "bad vision-language setups: no run directory left behind" test ! -e "$WORK/runs_vlm"
# a corrupt JPEG in a tar shard: training stops naming the shard and sample, or with
# data.skip_bad_samples skips it and counts it in train.log, metrics.jsonl and summary.json
"$LOOM" data synth-vqa --out "$WORK/vqab" --samples 40 --shard-size 20 >/dev/null 2>&1
/usr/bin/python3 - "$WORK/vqab/000000.tar" <<'PY'
import io, sys, tarfile
path = sys.argv[1]
members = []
with tarfile.open(path) as t:
    for m in t.getmembers():
        members.append((m, t.extractfile(m).read()))
with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
    for m, data in members:
        if m.name.endswith("00000003.jpg"):
            data = data[: len(data) // 3]  # truncated
        m.size = len(data)
        t.addfile(m, io.BytesIO(data))
PY
"$LOOM" data prepare "$WORK/vqab" --split 1,1,0 >/dev/null 2>&1
# two steps of 10 read each of the 20 train samples once (the bad one included)
vqab=(run.output_dir="$WORK/runs_skip" training.steps=2 training.micro_batch_size=10
  training.seq_len=48 data.format=vqa data.vqa_path="$WORK/vqab" data.image_max_pixels=12544
  data.tokenizer="$WORK/vqab/tokenizer.json" model.vocab_size=384 model.preset=tiny-qwen2.5-vl
  checkpoint.every=1)
expect_fail "corrupt JPEG in a shard" "000000.tar, sample 00000003" "$LOOM" train "${vqab[@]}"
rm -rf "$WORK/runs_skip"
if "$LOOM" train "${vqab[@]}" data.skip_bad_samples=true --quiet >"$WORK/skip.log" 2>&1; then
  run=$(ls -d "$WORK"/runs_skip/*/ | head -1)
  check "skipped sample in train.log" grep -q "skipped 1 bad sample in all .*00000003" "$run/train.log"
  check "skipped count in metrics.jsonl" grep -q '"skipped_bad": 1}' "$run/metrics.jsonl"
  check "skipped count in summary.json" grep -q '"skipped_bad_samples": 1' "$run/summary.json"
  check "skipped count in the final checkpoint" grep -q '"skipped_bad_samples": 1' \
    "$run/final_checkpoint/trainer_state.json"
  # resuming after step 1 (whether the bad sample came in step 1 or 2) ends with the same count
  "$LOOM" train --resume "$run/checkpoint_1" --quiet >"$WORK/skip_resume.log" 2>&1
  check "skipped count survives a resume" grep -q '"skipped_bad_samples": 1' "$run/summary.json"
else
  fail "training with data.skip_bad_samples failed: $(tail -2 "$WORK/skip.log")"
fi
check "no temporary files anywhere" test -z "$(find "$WORK" -name '*.tmp.*')"
finish
