#!/usr/bin/env bash
# --resume is validated before anything of the run changes: every failed resume below leaves
# the run directory byte-identical (sha256 of every file, and the list of entries, including
# a stale checkpoint_99.tmp that a successful resume would remove) and names the problem; a
# model-shape mismatch names the tensor, the expected and the found shape. Then: --resume
# latest / RUN_DIR pick the newest complete checkpoint, skip an incomplete one, remove stale
# entries, continue bitwise; metrics.jsonl with a cut last line resumes cleanly; pruning keeps
# exactly keep_last complete checkpoints (also ones that an older prune missed).
. "$(dirname "$0")/common.sh"
make_data || { echo "could not make test data"; exit 1; }
export LOOM_REGISTRY=off
RUNS="$WORK/runs"
M=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=4 model.hidden=64
  training.seq_len=32 training.micro_batch_size=2 training.steps=12 training.log_every=1
  checkpoint.every=3 data.train_shards="$WORK/train.bin" --quiet)
"$LOOM" train "${M[@]}" run.output_dir="$WORK/ref" >/dev/null || { echo "reference failed"; exit 1; }
REF=$(ls -d "$WORK"/ref/*/)
"$LOOM" train "${M[@]}" run.output_dir="$RUNS" --stop-after 9 >/dev/null || { echo "run failed"; exit 1; }
RUN=$(ls -d "$RUNS"/*/)
RUN=${RUN%/}
mkdir "$RUN/checkpoint_99.tmp" && echo partial >"$RUN/checkpoint_99.tmp/model.safetensors"

state() { (cd "$RUN" && find . | sort && find . -type f | sort | xargs sha256sum); }
BEFORE=$(state)
untouched() { # what, expected error text, args... (run_loom: tests/loom.sh)
  local what=$1 want=$2; shift 2
  run_loom train "$@"
  check "$what: fails" test $RUN_RC != 0
  expect_err "$what: error" "$want"
  if [ "$(state)" = "$BEFORE" ]; then pass; else
    fail "$what: the run directory changed"; diff <(echo "$BEFORE") <(state) | head -5 >&2; fi
  echo "  $what: $(echo "$RUN_ERR" | head -1 | cut -c1-200)"
}
untouched "fewer layers" "tensor layers.2.attn_norm.weight (shape [64]), which the model of this config does not have" \
  --resume "$RUN" model.layers=2 --quiet
untouched "narrower model" "expected shape [320, 32] (from the config's model.*), found [320, 64]" \
  --resume "$RUN" model.hidden=32 model.heads=4 --quiet
untouched "not a run" "neither a run directory" --resume "$WORK" --quiet
untouched "latest, no runs directory" "cannot read the runs directory" --resume latest run.output_dir="$WORK/none" --quiet
mkdir "$WORK/empty"
untouched "latest, no run" "no run under '$WORK/empty'" --resume latest run.output_dir="$WORK/empty" --quiet

# damage the newest checkpoint (same size: the marker still matches), name it explicitly
cp -a "$RUN/checkpoint_9/trainer_state.json" "$WORK/ts.json"
sed -i '0,/"step": 9/s//"stXp": 9/' "$RUN/checkpoint_9/trainer_state.json"
BEFORE=$(state)
untouched "corrupt trainer_state.json" "\"step\" must be an integer >= 1 (it is missing); the checkpoint is damaged" --resume "$RUN/checkpoint_9" --quiet
cp -a "$WORK/ts.json" "$RUN/checkpoint_9/trainer_state.json"
# a missing shard: the marker check names it
mv "$RUN/checkpoint_9/optimizer.safetensors" "$WORK/opt.st"
BEFORE=$(state)
untouched "missing shard" "'optimizer.safetensors' is missing (COMPLETE lists it)" --resume "$RUN/checkpoint_9" --quiet
# a checkpoint without the marker (an interrupted save) is not loadable by name ...
mv "$WORK/opt.st" "$RUN/checkpoint_9/optimizer.safetensors"
mv "$RUN/checkpoint_9/COMPLETE" "$WORK/COMPLETE"
BEFORE=$(state)
untouched "no marker" "has no COMPLETE marker" --resume "$RUN/checkpoint_9" --quiet

# ... and skipped by --resume RUN_DIR, which takes checkpoint_6 and removes the stale entries;
# with keep_last=1 the save of checkpoint_9 prunes every older complete checkpoint, also a
# checkpoint_1 that the old pruning (which only removed step - keep_last*every) left behind
cp -a "$RUN/checkpoint_3" "$RUN/checkpoint_1"
printf '{"step": 7, "loss": 4.8' >>"$RUN/metrics.jsonl" # a cut last line (after step 9's line)
out=$("$LOOM" train --resume "$RUN" checkpoint.keep_last=1 --stop-after 9 2>&1 >/dev/null) ||
  fail "resume from the run dir failed: $out"
check "resume RUN_DIR picked checkpoint_6" grep -q "resumed from $RUN/checkpoint_6 at step 6" "$RUN/train.log"
check "stale entries removed" grep -q "removed what an interrupted job left: .*checkpoint_99.tmp" "$RUN/train.log"
check "incomplete checkpoint_9 replaced by a complete one" test -f "$RUN/checkpoint_9/COMPLETE"
check "no .tmp left" test -z "$(find "$RUN" -name '*.tmp')"
check "metrics.jsonl: 9 whole lines" test "$(grep -c '^{.*}$' "$RUN/metrics.jsonl")" = 9
check "keep_last=1: only checkpoint_9 left" test "$(cd "$RUN" && ls -d checkpoint_*)" = checkpoint_9
"$LOOM" train --resume latest run.output_dir="$RUNS" --quiet >/dev/null 2>"$WORK/l.err" ||
  fail "resume latest failed: $(cat "$WORK/l.err")"
check "resume latest picked checkpoint_9" grep -q "resumed from $RUN/checkpoint_9 at step 9" "$RUN/train.log"
if [ "$(losses "$REF")" = "$(losses "$RUN")" ]; then pass; else
  fail "losses after the resumes differ from the uninterrupted run"; diff <(losses "$REF") <(losses "$RUN") >&2; fi
check "final weights identical" cmp -s "$REF/final_checkpoint/model.safetensors" "$RUN/final_checkpoint/model.safetensors"
check "summary.json says finished" grep -q '"status": "finished"' "$RUN/summary.json"
# killed after final_checkpoint was saved but before summary.json: --resume latest redoes
# the last steps from the newest periodic checkpoint (final_checkpoint alone has nothing left)
cp "$RUN/final_checkpoint/model.safetensors" "$WORK/final_model.st"
rm "$RUN/summary.json"
"$LOOM" train --resume latest run.output_dir="$RUNS" --quiet >/dev/null 2>"$WORK/redo.err" ||
  fail "resume of a run killed after its final save failed: $(cat "$WORK/redo.err")"
check "redo: resumed from checkpoint_9" grep -q "resumed from $RUN/checkpoint_9 at step 9" "$RUN/train.log"
check "redo: summary finished" grep -q '"status": "finished"' "$RUN/summary.json"
check "redo: same final weights" cmp -s "$WORK/final_model.st" "$RUN/final_checkpoint/model.safetensors"
if [ "$(losses "$REF")" = "$(losses "$RUN")" ]; then pass; else fail "redo: losses differ"; fi
# a finished run: --resume latest has nothing to do and changes nothing
BEFORE=$(state)
untouched "finished run" "nothing left to train (raise training.steps" --resume latest run.output_dir="$RUNS" --quiet

# one process under --max-restarts (no mpirun): killed with SIGKILL before step 5, relaunched
# from checkpoint_3, the same losses and weights as the uninterrupted run
rm -f "$WORK/once"
out=$(LOOM_FAULT_ONCE="$WORK/once" LOOM_FAULT=kill:0:5 "$LOOM" train "${M[@]}" run.output_dir="$WORK/sup" \
  --max-restarts 1 2>&1 >/dev/null) || fail "one process, --max-restarts 1: failed: $out"
SUP=$(ls -d "$WORK"/sup/*/)
check "one process: killed once" test -e "$WORK/once"
check "one process: the restart is in train.log" grep -q "restart 1 of 1 after: .*signal 9.*resuming from ${SUP}checkpoint_3" "$SUP/train.log"
if [ "$(losses "$REF")" = "$(losses "$SUP")" ]; then pass; else fail "one process restart: losses differ"; fi
check "one process restart: same final weights" cmp -s "$REF/final_checkpoint/model.safetensors" "$SUP/final_checkpoint/model.safetensors"

# one job per run directory: a resume while the run's job is still running is refused
# (before it could clean up the running job's checkpoint_<N>.tmp), and the job is undisturbed
"$LOOM" train "${M[@]}" run.output_dir="$WORK/busy" training.steps=1000000 checkpoint.every=200 \
  checkpoint.keep_last=0 >/dev/null 2>"$WORK/busy.err" &
busy=$!
for _ in $(seq 600); do [ -n "$(ls -d "$WORK"/busy/*/checkpoint_200 2>/dev/null)" ] && break; sleep 0.05; done
ck=$(ls -d "$WORK"/busy/*/checkpoint_200 2>/dev/null)
if [ -n "$ck" ]; then
  err=$("$LOOM" train --resume "$ck" --quiet 2>&1 >/dev/null)
  if [[ "$err" == *"is in use by another loom job"* ]]; then pass; else fail "resume of a running job: $err"; fi
  check "the running job is undisturbed" kill -0 $busy
  check "its checkpoint is still complete" "$LOOM" ckpt compare "$ck" "$ck" >/dev/null
else
  fail "the busy run did not reach checkpoint_200: $(cat "$WORK/busy.err")"
fi
kill $busy 2>/dev/null
wait $busy 2>/dev/null
finish
