#!/usr/bin/env bash
# The Slurm launcher against a real Slurm: Debian's slurm-wlm (slurmctld + slurmd on this
# machine as node "localhost", munge for authentication), configured and started by this test
# in its temp dir (own slurm.conf, ports, spool and state directories, munge key and socket),
# stopped at the end; every wait is bounded. A sweep of three points is submitted with
# sbatch, run by slurmd and summarised: a one-rank point, a two-rank point (dp=2) whose ranks
# srun starts (Open MPI direct launch through PMIx: SLURM_MPI_TYPE=pmix in the script), and a
# point with a bad config that must show as FAILED with loom's error line. The summary's
# numbers are checked against the runs' own files, as for the local launcher.
# Needs root (slurmd starts job steps as the submitting user) and slurm-wlm + munge; without
# them the test prints SKIP and exits 77, which CTest reports as skipped, not passed.
. "$(dirname "$0")/../experiments.sh"
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to run slurmd (here uid $(id -u))"
for c in munged munge slurmctld slurmd sbatch squeue sinfo srun; do
  command -v $c >/dev/null || skip "$c not found: install slurm-wlm and munge (make deps)"
done
make_data || { echo "could not make test data"; exit 1; }
S=$WORK/slurm
mkdir -p "$S/munge" "$S/state" "$S/spool" && chmod 700 "$S/munge"
stop_slurm() { # each daemon by its pid file; bounded wait for it to go
  local f pid k
  for f in "$S/slurmd.pid" "$S/slurmctld.pid" "$S/munge/munged.pid"; do
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || continue
    for k in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
}
trap 'stop_slurm; rm -rf "$WORK"' EXIT
dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 2>/dev/null && chmod 400 "$S/munge/munge.key"
# --force: the temp dir's parents (/tmp) are writable by others, which munged refuses otherwise
munged --force --key-file="$S/munge/munge.key" --socket="$S/munge/munge.sock" \
  --pid-file="$S/munge/munged.pid" --log-file="$S/munge/munged.log" --seed-file="$S/munge/seed" ||
  { cat "$S/munge/munged.log" >&2; skip "munged does not start here"; }
munge -S "$S/munge/munge.sock" -n | unmunge -S "$S/munge/munge.sock" >/dev/null ||
  { fail "munge credential round trip"; finish; exit 1; }
base=$((20000 + $$ % 20000)) # ports of this test's controller and node
cat > "$S/slurm.conf" <<CONF
ClusterName=loomtest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$base
SlurmdPort=$((base + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge/munge.sock
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
PlugStackConfig=$S/plugstack.conf
NodeName=localhost NodeHostname=localhost CPUs=4 State=UNKNOWN
PartitionName=loomtest Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
: > "$S/plugstack.conf"
export SLURM_CONF=$S/slurm.conf
unset SLURM_MPI_TYPE SLURM_JOB_ID
slurmctld -f "$SLURM_CONF" -i && slurmd -f "$SLURM_CONF" -N localhost ||
  { tail -n 5 "$S"/slurm*.log >&2; skip "slurmctld/slurmd do not start here"; }
for k in $(seq 150); do # up to 30 s for the node to register as idle
  [ "$(sinfo -h -n localhost -o %t 2>/dev/null)" = idle ] && break; sleep 0.2; done
check "node localhost idle in sinfo" test "$(sinfo -h -n localhost -o %t 2>/dev/null)" = idle
[ "$(sinfo -h -n localhost -o %t 2>/dev/null)" = idle ] || { tail -n 20 "$S"/slurm*.log >&2; finish; exit 1; }

cat > "$WORK/grid.yaml" <<'YAML'
name: slurm_grid
base: base.yaml
parameters:
  parallel.dp: {values: [1, 2]}
  training.micro_batch_size: {values: [1]}
YAML
# the sweep runs from $WORK so that the runs' relative paths resolve as the jobs see them
(cd "$WORK" && "$LOOM" sweep run grid.yaml --launcher slurm --log-dir "$WORK/logs" \
  --time 00:05:00) > "$WORK/out.txt" 2>&1
check "sweep run --launcher slurm exits 0" test $? = 0
LOG=$(ls -d "$WORK"/logs/sweep_*)
cat > "$WORK/bad.yaml" <<'YAML'
name: slurm_bad
base: base.yaml
parameters:
  model.heads: {values: [3]}
YAML
(cd "$WORK" && "$LOOM" sweep run bad.yaml --launcher slurm --log-dir "$WORK/logs_bad") > "$WORK/out_bad.txt" 2>&1
BAD=$(ls -d "$WORK"/logs_bad/sweep_*)
jobs=$( (csv_col "$LOG/summary.csv" job_id; csv_col "$BAD/summary.csv" job_id) | grep -v '^$' | paste -sd,)
check "three jobs submitted ($jobs)" test "$(echo "$jobs" | tr , '\n' | grep -c '^[0-9][0-9]*$')" = 3
for k in $(seq 600); do # up to 120 s for the jobs to leave the queue
  [ -z "$(squeue -h -j "$jobs" 2>/dev/null)" ] && break; sleep 0.2; done
check "jobs finished within 120 s" test -z "$(squeue -h -j "$jobs" 2>/dev/null)"
(cd "$WORK" && "$LOOM" sweep summary "$LOG" > /dev/null && "$LOOM" sweep summary "$BAD" > /dev/null)
check "sweep summary exits 0" test $? = 0
for n in tiny-gpt2_dp1_bs1 tiny-gpt2_dp2_bs1; do
  dp=${n#tiny-gpt2_dp}; dp=${dp%%_*}
  st=$(csv_row "$LOG/summary.csv" name $n status)
  check "$n: SUCCESS under Slurm (got $st)" test "$st" = SUCCESS
  [ "$st" = SUCCESS ] || tail -n 15 "$LOG/$n.log" >&2
  check "$n: $dp ranks" test "$(csv_row "$LOG/summary.csv" name $n ranks)" = "$dp"
  check "$n: sbatch asked for $dp tasks" grep -qx -- "#SBATCH --ntasks=$dp" "$LOG/slurm/$n.sbatch"
  check "$n: the job ran on the node (log header)" grep -q "^# loom sweep point $n on .*, job [0-9]" "$LOG/$n.log"
  check "$n: srun's exit status 0 recorded" grep -qx "# loom sweep point exit status 0" "$LOG/$n.log"
done
"$LOOM" runs --runs-dir "$WORK/runs" --sweep slurm_grid --format csv --show name status ranks > "$WORK/runs.csv"
check "dp2 point: one registry row, 2 ranks, finished" \
  test "$(grep '^tiny-gpt2_dp2_bs1,' "$WORK/runs.csv")" = "tiny-gpt2_dp2_bs1,finished,2"
check "dp2 point: srun started both ranks (PMIx)" grep -q "SLURM_MPI_TYPE=.*pmix" "$LOG/slurm/tiny-gpt2_dp2_bs1.sbatch"
check_summary_numbers "$LOG"
st=$(csv_row "$BAD/summary.csv" name tiny-gpt2_nh3 status)
check "bad config under Slurm: FAILED (got $st)" test "$st" = FAILED
check "bad config: summary.txt carries loom's error" \
  grep -q "^    error: loom train: error: model.heads (3) does not divide model.hidden (32)" "$BAD/summary.txt"
check "bad config: srun's exit status 1 recorded" grep -qx "# loom sweep point exit status 1" "$BAD/tiny-gpt2_nh3.log"
finish
