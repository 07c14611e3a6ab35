#!/usr/bin/env bash
# The sweep runner gives multi-rank points what `loom train --nproc` gives mpirun
# (loom/mpi_env.h): run WITHOUT Open MPI's root consent in the environment, a sweep's dp=2
# point succeeds (as root, mpirun refuses to start without OMPI_ALLOW_RUN_AS_ROOT*; before the
# shared function, such points failed with "exit status 1"), and so does `loom train --nproc 2`
# through the same function. Failed points carry the line of
# their log that says why, in summary.txt (table row and Runs section) and summary.csv
# (error column): loom's own message for a bad config (one rank, and three ranks where
# mpirun adds its MPI_ABORT block after it), mpirun's message when mpirun itself fails.
. "$(dirname "$0")/../experiments.sh"
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 1; }
make_data || { echo "could not make test data"; exit 1; }
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe
[ "$(id -u)" = 0 ] && echo "running as root without OMPI_ALLOW_RUN_AS_ROOT: the sweep must set it" ||
  echo "not root: the root consent part is not exercised (the rest is)"
cat > "$WORK/env.yaml" <<'YAML'
name: env
base: base.yaml
parameters:
  parallel.dp: {values: [2]}
  training.micro_batch_size: {values: [1]}
YAML
"$LOOM" sweep run "$WORK/env.yaml" --log-dir "$WORK/logs1" > "$WORK/out1.txt" 2>&1
rc=$?
check "sweep with a dp=2 point exits 0 (got $rc)" test $rc = 0
[ $rc = 0 ] || tail -n 20 "$WORK/out1.txt" "$WORK"/logs1/sweep_*/*.log >&2
L1=$(ls -d "$WORK"/logs1/sweep_*)
check "dp=2 point SUCCESS with 2 ranks" test "$(csv_row "$L1/summary.csv" name tiny-gpt2_dp2_bs1 status),$(csv_row "$L1/summary.csv" name tiny-gpt2_dp2_bs1 ranks)" = SUCCESS,2
check "the point ran under mpirun" grep -q "command: 'mpirun' '-np' '2'" "$L1/tiny-gpt2_dp2_bs1.log"
check "no error recorded for a successful point" test -z "$(csv_row "$L1/summary.csv" name tiny-gpt2_dp2_bs1 error)"

# the same function serves `loom train --nproc` (src/cli/util.c)
"$LOOM" train "$WORK/base.yaml" run.name=nproc parallel.dp=2 training.micro_batch_size=1 --nproc 2 \
  --quiet > "$WORK/nproc.log" 2>&1
check "loom train --nproc 2 without the consent in the environment exits 0" test $? = 0
check "... and ran 2 ranks" test "$("$LOOM" runs --runs-dir "$WORK/runs" --filter "name = 'nproc'" \
  --format csv --show ranks | tail -1)" = 2

cat > "$WORK/bad.yaml" <<'YAML'
name: bad
base: base.yaml
parameters:
  model.heads: {values: [4, 3]}
  parallel.tp: {values: [1, 3]}
YAML
"$LOOM" sweep run "$WORK/bad.yaml" --log-dir "$WORK/logs2" > "$WORK/out2.txt" 2>&1
check "sweep with failing points exits 1" test $? = 1
L2=$(ls -d "$WORK"/logs2/sweep_*)
err() { csv_row "$L2/summary.csv" name "$1" error; }
check "heads 4, tp 1: SUCCESS" test "$(csv_row "$L2/summary.csv" name tiny-gpt2_nh4_tp1 status)" = SUCCESS
check "heads 3 (1 rank): error is loom's message" test "$(err tiny-gpt2_nh3_tp1)" = \
  "loom train: error: model.heads (3) does not divide model.hidden (32); choose heads that divide hidden or set model.head_dim explicitly"
# three ranks write into one log through mpirun, so their lines can interleave mid-line; when
# a whole line of loom's is in the log (nearly always), it is the one picked
if grep -q "^loom: .*parallel.tp (3) must divide model.heads (4)" "$L2/tiny-gpt2_nh4_tp3.log"; then
  check "heads 4, tp 3 (3 ranks): loom's message, not mpirun's MPI_ABORT block ($(err tiny-gpt2_nh4_tp3))" \
    grep -q "^loom: .*parallel.tp (3) must divide model.heads (4)" <<< "$(err tiny-gpt2_nh4_tp3)"
  check "summary.txt Runs section carries the error" \
    grep -q "^    error: loom: .*parallel.tp (3) must divide model.heads (4)" "$L2/summary.txt"
  grep -q "^loom: .*parallel.tp (3)" <<< "$(err tiny-gpt2_nh4_tp3)" || cat -A "$L2/tiny-gpt2_nh4_tp3.log" >&2
else
  echo "note: the ranks' lines interleaved mid-line in this log; the 3-rank pick is not checked"
fi
check "summary.txt table row carries the error" \
  grep -q "^tiny-gpt2_nh3_tp1 *| FAILED .*  error: loom train: error: model.heads (3) does not divide" "$L2/summary.txt"
check "the runner's FAILED line carries it too" \
  grep -q "FAILED .*tiny-gpt2_nh3_tp1 .*exit status 1: loom train: error: model.heads (3)" "$WORK/out2.txt"
check "the successful point's row has no error" \
  grep -q "^tiny-gpt2_nh4_tp1 *| SUCCESS [^e]*$" "$L2/summary.txt"

# mpirun itself failing: its own message
"$LOOM" sweep run "$WORK/env.yaml" --log-dir "$WORK/logs3" --mpirun-args "--no-such-mpirun-flag" > "$WORK/out3.txt" 2>&1
check "sweep whose mpirun fails exits 1" test $? = 1
L3=$(ls -d "$WORK"/logs3/sweep_*)
check "summary.txt: the error is mpirun's own message" \
  grep -q '^    error: mpirun: Error: unknown option "--no-such-mpirun-flag"$' "$L3/summary.txt"
check "summary.csv: the same, CSV-quoted" \
  grep -q ',"mpirun: Error: unknown option ""--no-such-mpirun-flag""",' "$L3/summary.csv"
finish
