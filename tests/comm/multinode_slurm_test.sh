#!/usr/bin/env bash
# `loom sweep --launcher slurm` through a real Slurm over two nodes (scripts/nodes.sh) with a
# slurmctld and one slurmd per node inside the nodes' namespaces (scripts/nodes_slurm.sh:
# slurm.conf, munge and every daemon's files in this test's temp dir):
# - sinfo lists both nodes idle;
# - a sweep of two points with --ntasks-per-node 2: dp2 (one node) and dp4 (two nodes x 2
#   ranks, started by srun through PMIx in both nodes) both SUCCESS in the summary, their
#   jobs gone from the queue, the registry's rows finished;
# - the dp4 point's sbatch asks for 2 nodes x 2 tasks, its batch step ran on node 0, and its
#   run's train.log places ranks 0-1 on node 0 and 2-3 on node 1 (its ranks were in the
#   nodes' namespaces: their host names), comm.json counts inter-node bytes;
# - the dp4 point's losses equal, bitwise, those of the same config started across the same
#   nodes by mpirun (the launcher changes where ranks start, not what they compute).
# Root only, with slurm-wlm and munge (skipped with a plain message elsewhere); the daemons
# and the nodes are removed whatever happens.
. "$(dirname "$0")/multinode_common.sh"
for c in munged munge slurmctld slurmd sbatch squeue sinfo srun; do
  command -v $c >/dev/null || skip "$c not found: install slurm-wlm and munge"
done
SLURM=$(dirname "$NODES")/nodes_slurm.sh
LOOM=$(realpath "$LOOM") # the sweep runs from $WORK
C=$WORK/slurm
trap '"$SLURM" down "$C" >/dev/null 2>&1; pkill -KILL -f -- "$WORK/" 2>/dev/null
  "$NODES" down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
make_data || { echo "could not make test data"; exit 1; }

if ! "$SLURM" up "$C" 2 >"$WORK/slurm_up.log" 2>&1; then
  cat "$WORK/slurm_up.log"; tail -n 5 "$C"/*.log 2>/dev/null
  skip "slurmctld/slurmd do not start in the nodes here"
fi
export $("$SLURM" env "$C")
unset SLURM_MPI_TYPE SLURM_JOB_ID
idle=$(sinfo -h -N -o '%N %t' | sort | paste -sd' ')
check "sinfo: both nodes idle ($idle)" test "$idle" = "$N0 idle $N1 idle"

cat >"$WORK/base.yaml" <<YAML
run: {output_dir: $WORK/runs}
model: {preset: tiny-gpt2, vocab_size: 300, hidden: 64, layers: 2, intermediate: 128}
training: {seq_len: 32, micro_batch_size: 1, grad_accum: 2, steps: 10, warmup_steps: 2}
data: {train_shards: $WORK/train.bin, val_fraction: 0}
checkpoint: {every: 0}
YAML
cat >"$WORK/grid.yaml" <<'YAML'
name: nodes_grid
base: base.yaml
parameters:
  parallel.dp: {values: [2, 4]}
YAML
echo "loom sweep run --launcher slurm --ntasks-per-node 2 (points dp2, dp4)"
(cd "$WORK" && "$LOOM" sweep run grid.yaml --launcher slurm --log-dir "$WORK/logs" \
  --ntasks-per-node 2 --time 00:05:00) >"$WORK/sweep.txt" 2>&1
check "sweep run --launcher slurm exits 0" test $? = 0
LOG=$(ls -d "$WORK"/logs/sweep_*)
jobs=$(grep -o 'job [0-9]*' "$WORK/sweep.txt" | awk '{print $2}' | paste -sd,)
check "two jobs submitted ($jobs)" test "$(echo "$jobs" | tr , '\n' | grep -c .)" = 2
for k in $(seq 600); do # up to 120 s for the jobs to leave the queue
  [ -z "$(squeue -h -j "$jobs" 2>/dev/null)" ] && break; sleep 0.2; done
check "the jobs left the queue within 120 s" test -z "$(squeue -h -j "$jobs" 2>/dev/null)"
(cd "$WORK" && "$LOOM" sweep summary "$LOG" >/dev/null)
for dp in 2 4; do
  n=tiny-gpt2_dp$dp
  st=$(awk -F, -v n=$n '$1 == n {print $2}' "$LOG/summary.csv")
  check "$n: SUCCESS under Slurm (got $st)" test "$st" = SUCCESS
  [ "$st" = SUCCESS ] || tail -n 15 "$LOG/$n.log" >&2
done
check "dp4: sbatch asks for 2 nodes x 2 tasks" \
  grep -qx -- "#SBATCH --nodes=2" "$LOG/slurm/tiny-gpt2_dp4.sbatch"
check "dp4: its batch step ran on $N0" \
  grep -q "^# loom sweep point tiny-gpt2_dp4 on $N0, job [0-9]" "$LOG/tiny-gpt2_dp4.log"
R=$(run_dir tiny-gpt2_dp4)
check "dp4: ranks 0-1 on $N0, 2-3 on $N1" \
  grep -qF "nodes: $N0: ranks 0-1, $N1: ranks 2-3" "$R/train.log"
echo "  dp4: $(grep -h 'nodes: ' "$R/train.log" | sed 's/^\[[^]]*\] //')"
check "dp4: comm.json counts inter-node bytes" python3 -c "
import json, sys
sys.exit(not sum(r['inter_node'] for r in json.load(open('$R/comm.json'))['bytes_per_step']) > 0)"
check "dp2: on one node (no placement line)" eval '! grep -q "nodes: " "$(run_dir tiny-gpt2_dp2)/train.log"'
"$LOOM" runs --runs-dir "$WORK/runs" --sweep nodes_grid --format csv --show name status ranks \
  >"$WORK/runs.csv"
check "registry: both rows finished ($(grep -c ',finished,' "$WORK/runs.csv") of 2)" \
  test "$(grep -c ',finished,' "$WORK/runs.csv")" = 2

echo "the dp4 point's config under mpirun across the same nodes"
train_nodes mpirun_dp4 "$LOG/configs/tiny-gpt2_dp4.yaml" || true
a=$(losses "$R") b=$(losses "$(run_dir mpirun_dp4)")
if [ -n "$a" ] && [ "$a" = "$b" ]; then
  pass; echo "  dp4: $(echo "$a" | wc -l) losses, bitwise the same under Slurm and mpirun"
else fail "dp4: the losses under Slurm differ from mpirun's"; fi
finish
