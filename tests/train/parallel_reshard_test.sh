#!/usr/bin/env bash
# Sharded checkpoints: save in one layout, load in another, continue — the loss curve matches
# the uninterrupted run (tolerance 1e-5 relative, as in equivalence_test.sh); resuming in the
# same layout stays bitwise identical; the trace of a run names every instruction.
. "$(dirname "$0")/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }
M=(model.preset=tiny-llama model.vocab_size=300 model.layers=4 model.hidden=64 model.heads=4
  model.kv_heads=2 model.intermediate=96 training.seq_len=32 training.steps=6 training.warmup_steps=2
  training.grad_accum=2 data.train_shards="$WORK/train.bin" checkpoint.every=3)

train straight 1 "${M[@]}" training.micro_batch_size=4
# written by 4 ranks: dp2 x tp2 with ZeRO-1 (optimizer state partitioned), stopped at step 3
train src 4 "${M[@]}" training.micro_batch_size=2 parallel.dp=2 parallel.tp=2 parallel.zero=1 --stop-after 3
src=$(run_dir src)
check "sharded checkpoint has an index" test -f "$src/checkpoint_3/index.json"
check "four optimizer shards (ZeRO-1 over dp, tp slices)" test "$(ls "$src/checkpoint_3"/optimizer-r*.safetensors | wc -l)" = 4

resume_as() { # name np overrides...: resume the interrupted run in another layout: a new run
  local name=$1 np=$2; shift 2 # (named $name) forked at step 3, its metrics from step 4
  local ck="$src/checkpoint_3"
  if [ "$np" = 1 ]; then "$LOOM" train --resume "$ck" run.name="$name" "$@" --quiet >"$WORK/$name.log" 2>&1
  else timeout 300 "${MPIRUN[@]}" -np "$np" "$LOOM" train --resume "$ck" run.name="$name" "$@" --quiet >"$WORK/$name.log" 2>&1; fi ||
    { fail "$name: resume failed"; tail -5 "$WORK/$name.log" >&2; return; }
  close_losses straight "$name" 1e-5 3
}
resume_as one_process 1 parallel.dp=1 parallel.tp=1 parallel.zero=0 training.micro_batch_size=4
resume_as pp2_1f1b 2 parallel.dp=1 parallel.tp=1 parallel.zero=0 parallel.pp=2 training.micro_batch_size=4
resume_as tp2_megatron 2 parallel.dp=1 parallel.zero=0 parallel.sp_mode=megatron training.micro_batch_size=4
resume_as dp2_zero2 2 parallel.tp=1 parallel.zero=2 training.micro_batch_size=2
resume_as dp4_zero1 4 parallel.dp=4 parallel.tp=1 training.micro_batch_size=1
resume_as dp2_zero3 2 parallel.tp=1 parallel.zero=3 training.micro_batch_size=2
# same layout, same config: the interrupted run itself continues (in a copy, its own id)
cp -r "$src" "$WORK/copy_same_layout"
timeout 300 "${MPIRUN[@]}" -np 4 "$LOOM" train --resume "$WORK/copy_same_layout/checkpoint_3" --quiet \
  >"$WORK/same_layout.log" 2>&1 || { fail "same_layout: resume failed"; tail -5 "$WORK/same_layout.log" >&2; }

# same layout: bitwise (the uninterrupted run in that layout vs stop + resume)
train src_straight 4 "${M[@]}" training.micro_batch_size=2 parallel.dp=2 parallel.tp=2 parallel.zero=1
if [ "$(losses "$(run_dir src_straight)")" = "$(losses "$WORK/copy_same_layout")" ]; then pass; else
  fail "same-layout resume is not bitwise identical"; diff <(losses "$(run_dir src_straight)") <(losses "$WORK/copy_same_layout") >&2; fi

# export of a sharded checkpoint equals the export of the same weights from one process
"$LOOM" ckpt compare "$(run_dir src_straight)/final_checkpoint" "$(run_dir one_process)/final_checkpoint" --rtol 1e-4 >/dev/null &&
  pass || fail "sharded final weights differ from the one-process resume"

# the Chrome trace of a pipelined run names each rank's instructions and collectives
train traced 2 "${M[@]}" training.micro_batch_size=4 parallel.pp=2 training.steps=1 checkpoint.every=0 --trace "$WORK/trace.json"
/usr/bin/python3 - "$WORK/trace.json" <<'PY' && pass || fail "trace content"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in ev if e.get("ph") == "X"]
ranks = {e["pid"] for e in x}
assert ranks == {0, 1}, ranks
names = {e["name"] for e in x if e["tid"] == 0}
for want in ("forward chunk=0 mb=0", "backward chunk=0 mb=1", "send-act chunk=0 mb=0 to=1",
             "recv-grad chunk=0 mb=0 from=1", "optimizer-step"):
    assert want in names, (want, sorted(names)[:20])
assert any(e["tid"] == 1 and e["args"].get("bytes", 0) > 0 for e in x), "no collective with bytes"
PY
# data parallelism overlaps gradient reduction with the backward: with one bucket per layer,
# the first bucket's all-reduce starts before the last backward instruction ends
train overlap 2 "${M[@]}" training.micro_batch_size=2 parallel.dp=2 parallel.bucket_mb=0.01 \
  training.steps=1 checkpoint.every=0 --trace "$WORK/overlap.json"
/usr/bin/python3 - "$WORK/overlap.json" <<'PY' && pass || fail "gradient buckets do not overlap the backward"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e["pid"] == 0]
buckets = [e for e in ev if e["name"].startswith("all-reduce (gradient bucket)")]
backward = [e for e in ev if e["tid"] == 0 and e["name"].startswith("backward")]
assert len(buckets) >= 4, len(buckets)           # one per layer
last_bwd_end = max(e["ts"] + e["dur"] for e in backward)
first_bucket = min(e["ts"] for e in buckets)
assert first_bucket < last_bwd_end, (first_bucket, last_bwd_end)
print(f"  overlap: {len(buckets)} buckets, the first issued {last_bwd_end - first_bucket:.0f} us before the backward ended")
PY
finish
