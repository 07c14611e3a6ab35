#!/usr/bin/env bash
# The grid sweep of 4 tiny runs, two of them multi-rank (parallel.dp=2 under mpirun -np 2),
# run by the local launcher: every point succeeds, the multi-rank ones as 2 ranks, the runs
# are registered with their rank counts and statuses, and the summary's numbers equal what
# the runs' own metrics files say. Needs Open MPI's mpirun.
. "$(dirname "$0")/../experiments.sh"
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 1; }
make_data || { echo "could not make test data"; exit 1; }
# Open MPI's own allocations show as leaks under LeakSanitizer (sanitizer builds)
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
cat > "$WORK/grid.yaml" <<'YAML'
name: grid_mr
base: base.yaml
parameters:
  parallel.dp: {values: [1, 2]}
  training.dtype: {values: [fp32, bf16]}
YAML
"$LOOM" sweep run "$WORK/grid.yaml" --log-dir "$WORK/logs" > "$WORK/out.txt" 2>&1
rc=$?
check "grid sweep with multi-rank points exits 0" test $rc = 0
[ $rc = 0 ] || tail -n 20 "$WORK/out.txt" "$WORK"/logs/sweep_*/*.log >&2
LOG=$(ls -d "$WORK"/logs/sweep_*)
"$LOOM" runs --runs-dir "$WORK/runs" --sweep grid_mr --format csv --show name status ranks parallel.dp \
  training.dtype > "$WORK/runs.csv"
for n in tiny-gpt2_dp1_fp32 tiny-gpt2_dp1_bf16 tiny-gpt2_dp2_fp32 tiny-gpt2_dp2_bf16; do
  dp=${n#tiny-gpt2_dp}; dp=${dp%%_*}
  check "$n: SUCCESS" test "$(csv_row "$LOG/summary.csv" name $n status)" = SUCCESS
  check "$n: $dp ranks in summary" test "$(csv_row "$LOG/summary.csv" name $n ranks)" = "$dp"
  check "$n: registry finished" test "$(csv_row "$WORK/runs.csv" name $n status)" = finished
  check "$n: registry ranks" test "$(csv_row "$WORK/runs.csv" name $n ranks)" = "$dp"
  check "$n: registry parallel.dp" test "$(csv_row "$WORK/runs.csv" name $n parallel.dp)" = "$dp"
  check "$n: one registry row (rank 0 only)" test "$(grep -c "^$n," "$WORK/runs.csv")" = 1
done
check "multi-rank point ran under mpirun" grep -q "command: 'mpirun' '-np' '2'" "$LOG/tiny-gpt2_dp2_fp32.log"
check_summary_numbers "$LOG"
finish
