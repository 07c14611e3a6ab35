#!/usr/bin/env bash
# A network that fails under a job across two nodes (scripts/nodes.sh, 2 ranks each; dp2 x tp2:
# tp inside a node, dp across), with `loom train --nproc 4` supervising it from node 0 (the
# head node) and the link of node 1 cut from the root namespace (`nodes.sh link NODE down`:
# its veth on the bridge goes down):
# - in the middle of a step: every rank stops within parallel.timeout_s (no rank of the job is
#   left), the launcher reports one failure naming the node it lost (node 1) and the rank
#   there; train.log and summary.json say the same; the newest checkpoint is complete and
#   loads (`loom ckpt inspect`), and `--resume` once the link is back finishes the run with the
#   final loss of an uninterrupted run, bitwise;
# - with --max-restarts 1: the launcher relaunches at once, the relaunch waits for the node
#   (its daemon cannot reach mpirun) until the link comes back, and the run finishes with the
#   same final loss, bitwise;
# - during a checkpoint write (LOOM_FAULT=pause-save: rank 2, on node 1, has written its
#   pieces of checkpoint 20 and sleeps; the link is cut then): the half-written checkpoint is
#   never taken for a complete one, the relaunch resumes from checkpoint 10 and finishes with
#   the same final loss, bitwise.
# Root only (skipped with a plain message elsewhere); the nodes are removed whatever happens.
. "$(dirname "$0")/multinode_common.sh"
make_data || { echo "could not make test data"; exit 1; }

TIMEOUT_S=6
GPT2=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64
  model.intermediate=128 training.seq_len=32 training.steps=30 training.warmup_steps=2
  training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.tp=2
  data.train_shards="$WORK/train.bin" data.val_fraction=0 checkpoint.every=10
  parallel.timeout_s=$TIMEOUT_S)
link_down() { "$NODES" link "$N1" down; }
link_up() { "$NODES" link "$N1" up; }
# on the way out, whatever happened: the link back, this test's jobs (their command lines hold
# its own $WORK) killed, the nodes removed
trap 'link_up 2>/dev/null; pkill -KILL -f -- "$WORK/" 2>/dev/null; "$NODES" down >/dev/null 2>&1
  rm -rf "$WORK"' EXIT

# supervised NAME [VAR=...] -- overrides...: `loom train --nproc 4` on node 0 in the
# background (pid in $SUP); stdout/stderr in $WORK/NAME.out/.err
supervised() {
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  "$NODES" exec "$N0" env $("$NODES" env) "${envs[@]}" timeout 400 "$LOOM" train --nproc 4 \
    "${GPT2[@]}" "$@" run.name="$name" run.output_dir="$WORK/runs" --quiet \
    >"$WORK/$name.out" 2>"$WORK/$name.err" &
  SUP=$!
}
# the ranks of run NAME (not the launcher: its command line has --nproc; not mpirun)
ranks_alive() { pgrep -f "^[^ ]*loom train model\.preset=.* run\.name=$1 " >/dev/null; }
final_loss() { losses "$(run_dir "$1")" | tail -1; }
same_final() { # NAME: the last loss equals the uninterrupted run's, bitwise
  local a b
  a=$(final_loss ref) b=$(final_loss "$1")
  if [ -n "$a" ] && [ "$a" = "$b" ] && at_step "$1" 30; then
    pass; echo "  $1: final loss $b, bitwise the uninterrupted run's"
  else
    local reached=no
    at_step "$1" 30 && reached=yes
    fail "$1: final loss '$b' (step 30 reached: $reached), uninterrupted '$a'"
  fi
}

echo "uninterrupted, across the nodes"
train_nodes ref "${GPT2[@]}" || { finish; exit 1; }

echo "the link of $N1 cut in the middle of a step, no restarts"
supervised cut LOOM_FAULT=slow:0:1 --
wait_for "cut: step 14" 120 at_step cut 14
link_down
t0=$SECONDS
wait_for "cut: every rank stopped" $((TIMEOUT_S + 20)) eval '! ranks_alive cut'
stopped=$((SECONDS - t0))
check "cut: every rank stopped within parallel.timeout_s = $TIMEOUT_S s (+2 s): took ${stopped} s" \
  test $stopped -le $((TIMEOUT_S + 2))
wait $SUP
rc=$?
check "cut: the launcher exits 1 (rc $rc)" test $rc = 1
err=$(grep "the job failed" "$WORK/cut.err")
check "cut: one failure reported" test "$(grep -c "the job failed" "$WORK/cut.err")" = 1
check "cut: the failure names $N1 and a rank there" grep -qE "ranks? [0-9, -]+ on $N1" <<<"$err"
echo "  $(cut -c1-220 <<<"$err")"
D=$(run_dir cut)
check "cut: train.log records it" \
  grep -q "error: the job ended without a report from loom: .*$N1" "$D/train.log"
check "cut: summary.json says failed" grep -q '"status": "failed"' "$D/summary.json"
newest=$(ls -d "$D"/checkpoint_* 2>/dev/null | grep -v '\.tmp\|pruned' | sort -V | tail -1)
check "cut: a complete checkpoint (${newest##*/})" test -n "$newest" -a -f "$newest/COMPLETE"
check "cut: it loads" "$LOOM" ckpt inspect "$newest" >/dev/null 2>&1
link_up
if "${MPI_NODES[@]}" $("$NODES" mpirun-args) "$LOOM" train --resume "$D" --quiet \
  >"$WORK/cut_resume.log" 2>&1; then same_final cut
else fail "cut: --resume once the link is back failed"; tail -5 "$WORK/cut_resume.log" >&2; fi

echo "the link cut in the middle of a step, --max-restarts 1, the link back 10 s later"
supervised restart LOOM_FAULT=slow:0:1 -- --max-restarts 1
wait_for "restart: step 14" 120 at_step restart 14
link_down
wait_for "restart: the relaunch" $((TIMEOUT_S + 40)) grep -qs "restart 1 of 1" "$WORK/restart.err"
sleep 10
link_up
wait $SUP
rc=$?
check "restart: the job comes back and finishes (rc $rc)" test $rc = 0
check "restart: train.log names $N1 as the reason" \
  grep -q "restart 1 of 1 after: .*$N1" "$(run_dir restart)/train.log"
same_final restart

echo "the link cut while checkpoint 20 is half written, --max-restarts 1"
supervised ckpt LOOM_FAULT=pause-save:2:20 LOOM_FAULT_PAUSE_S=$((TIMEOUT_S + 4)) \
  LOOM_FAULT_ONCE="$WORK/ckpt.once" -- --max-restarts 1
wait_for "ckpt: rank 2 in the checkpoint write" 120 grep -qs "rank 2 paused" "$WORK/ckpt.err"
link_down
wait_for "ckpt: the relaunch" $((TIMEOUT_S + 40)) grep -qs "restart 1 of 1" "$WORK/ckpt.err"
sleep 5
link_up
wait $SUP
rc=$?
check "ckpt: the job comes back and finishes (rc $rc)" test $rc = 0
check "ckpt: resumed from checkpoint 10, not the half-written 20" \
  grep -q "restart 1 of 1 after: .*resuming from .*checkpoint_10" "$(run_dir ckpt)/train.log"
same_final ckpt
finish
