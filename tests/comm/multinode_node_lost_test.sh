#!/usr/bin/env bash
# A node that disappears for good under a job across two nodes (scripts/nodes.sh, 2 ranks
# each; dp4 with micro-batch 1 and grad_accum 2: a global batch of 8 sequences), supervised by
# `loom train --nproc 4 --max-restarts 1` on node 0, checkpoints every 10 steps:
# - `nodes.sh remove` takes node 1 away at step 14 as a power loss would (its processes
#   stopped, its link and namespaces removed): the ranks on node 0 time out naming node 1's
#   ranks; the supervisor relaunches once, the relaunch cannot start a daemon on node 1, and
#   the supervisor gives up with one message naming the node and the way on (resume on the
#   nodes left), also in train.log; summary.json says failed; exit status 1;
# - `loom train --resume <run> parallel.dp=2 training.grad_accum=4` on node 0 alone (2 ranks; a
#   reshard from checkpoint 10 of dp4) keeps the global batch (2 x 4 x 1 = 8 sequences): the
#   forked run's losses of steps 11-30 are the uninterrupted dp4 run's within 1e-5 relative,
#   not bitwise (dp2 x 4 micro-batches sums the same gradients in another order); the fork's
#   train.log names the keys that changed;
# - loom does not keep the global batch by itself: `--resume <run> parallel.dp=2` alone trains
#   with grad_accum 2, a global batch of 4 sequences (train.log says so): another trajectory.
# Root only (skipped with a plain message elsewhere); the nodes, and the stopped processes of
# the removed one, are removed whatever happens.
. "$(dirname "$0")/multinode_common.sh"
make_data || { echo "could not make test data"; exit 1; }
trap 'pkill -KILL -f -- "$WORK/" 2>/dev/null; "$NODES" down >/dev/null 2>&1; rm -rf "$WORK"' EXIT

TIMEOUT_S=6
GPT2=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64
  model.intermediate=128 training.seq_len=32 training.steps=30 training.warmup_steps=2
  training.micro_batch_size=1 training.grad_accum=2 parallel.dp=4
  data.train_shards="$WORK/train.bin" data.val_fraction=0 checkpoint.every=10
  parallel.timeout_s=$TIMEOUT_S)

echo "uninterrupted, dp4 across the nodes"
train_nodes ref "${GPT2[@]}" || { finish; exit 1; }

echo "node $N1 removed at step 14 under loom train --nproc 4 --max-restarts 1"
"$NODES" exec "$N0" env $("$NODES" env) LOOM_FAULT=slow:0:1 timeout 300 "$LOOM" train \
  --nproc 4 --max-restarts 1 "${GPT2[@]}" run.name=lost run.output_dir="$WORK/runs" --quiet \
  >"$WORK/lost.out" 2>"$WORK/lost.err" &
SUP=$!
wait_for "lost: step 14" 120 at_step lost 14
"$NODES" remove "$N1"
check "$N1 is gone ($("$NODES" list | awk '{print $1}' | paste -sd' '))" \
  test "$("$NODES" list | awk '{print $1}')" = "$N0"
t0=$SECONDS
wait $SUP
rc=$?
echo "  the supervisor ended $((SECONDS - t0)) s after the node went"
check "lost: the supervisor exits 1 (rc $rc)" test $rc = 1
check "lost: the first failure names $N1's ranks" \
  grep -q "restart 1 of 1 after: .*ranks\? [0-9, -]* on $N1" "$WORK/lost.err"
give=$(grep "giving up after 1 restart" "$WORK/lost.err")
check "lost: gives up once" test "$(grep -c "giving up" "$WORK/lost.err")" = 1
check "lost: the message names $N1 as the node it cannot start a daemon on" grep -q \
  "giving up after 1 restart: mpirun could not start its daemon on node $N1 " <<<"$give"
check "lost: the message says how to go on without it" \
  grep -q "to go on without node $N1, resume the run on the nodes left" <<<"$give"
echo "  $(cut -c1-240 <<<"$give")"
D=$(run_dir lost)
check "lost: train.log records the give-up" grep -q "giving up after 1 restart: .*$N1" "$D/train.log"
check "lost: summary.json says failed" grep -q '"status": "failed"' "$D/summary.json"
check "lost: checkpoint 10 is complete" test -f "$D/checkpoint_10/COMPLETE"

echo "resumed on $N0 alone: dp2, grad_accum 4 (the global batch kept)"
echo "$N0 slots=2" >"$WORK/one.hosts"
on_one() { # NAME overrides...: --resume the lost run on node 0's 2 ranks
  local name=$1; shift
  "$NODES" exec "$N0" timeout 300 mpirun --bind-to none -np 2 --hostfile "$WORK/one.hosts" \
    $("$NODES" mpirun-args) "$LOOM" train --resume "$D" "$@" run.name="$name" --quiet \
    >"$WORK/$name.log" 2>&1 || { fail "$name: the resume failed"; tail -5 "$WORK/$name.log" >&2; }
}
on_one dp2 parallel.dp=2 training.grad_accum=4
F=$(run_dir dp2)
check "dp2: train.log says the global batch is 8 sequences" \
  grep -q "grad_accum=4, global batch 8 sequences" "$F/train.log"
check "dp2: a fork from checkpoint 10 naming the changed layout" grep -q \
  "a new run forked from run ${D##*/} at .*checkpoint_10: .*training.grad_accum 2 -> 4, parallel.dp 4 -> 2" \
  "$F/train.log"
check "dp2: on one node (no placement line)" eval '! grep -q "nodes: " "$F/train.log"'
close_losses ref dp2 1e-5 10
echo "  final loss: $(losses "$F" | tail -1), uninterrupted $(losses "$(run_dir ref)" | tail -1)"

echo "resumed on $N0 alone with parallel.dp=2 only: loom does not keep the global batch"
on_one dp2_half parallel.dp=2
check "dp2_half: grad_accum stays 2, a global batch of 4 sequences" \
  grep -q "grad_accum=2, global batch 4 sequences" "$(run_dir dp2_half)/train.log"
echo "  final loss: $(losses "$(run_dir dp2_half)" | tail -1) (another trajectory)"
finish
