# Shared by the multi-rank tests: data made by loom itself, mpirun with the flags this machine
# needs, loss extraction and comparison within a relative tolerance.
. "$(dirname "$0")/../train/common.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN=(mpirun --oversubscribe --bind-to none)

# train NAME NP overrides... : one run under mpirun (NP=1: without mpirun), output in $WORK/runs
train() {
  local name=$1 np=$2; shift 2
  local log="$WORK/$name.log"
  if [ "$np" = 1 ]; then
    "$LOOM" train "$@" run.name="$name" run.output_dir="$WORK/runs" --quiet >"$log" 2>&1
  else
    timeout 300 "${MPIRUN[@]}" -np "$np" "$LOOM" train "$@" run.name="$name" \
      run.output_dir="$WORK/runs" --quiet >"$log" 2>&1
  fi || { fail "$name: training failed"; tail -5 "$log" >&2; return 1; }
}
run_dir() { ls -d "$WORK/runs/$1"_* | head -1; }
# close A B RTOL [SKIP]: every per-step loss of run B within RTOL (relative) of run A's; with
# SKIP, B is a run forked at step SKIP (its metrics start after it): A's first SKIP are left out
close_losses() {
  local a b
  a=$(losses "$(run_dir "$1")" | tail -n +$((${4:-0} + 1))) b=$(losses "$(run_dir "$2")")
  if [ -z "$b" ] || [ "$(echo "$a" | wc -l)" != "$(echo "$b" | wc -l)" ]; then
    fail "$2: has $(echo "$b" | grep -c .) losses, $1 has $(echo "$a" | wc -l)"; return; fi
  local worst
  worst=$(paste <(echo "$a") <(echo "$b") | awk -v t="$3" '
    { r = ($1 - $2) / $1; if (r < 0) r = -r; if (r > w) w = r } END { printf "%.2e", w; exit (w > t) }')
  if [ $? = 0 ]; then pass; echo "  $2: worst relative loss difference $worst (tolerance $3)";
  else fail "$2: losses differ from $1 by $worst relative (tolerance $3)"; fi
}
# validation losses of a run, "step loss" per line (metrics.jsonl lines of the evaluations)
val_losses() { sed -n 's/^{"step": \([0-9]*\), "val_loss": \([^,]*\),.*/\1 \2/p' "$1/metrics.jsonl"; }
# close_val_losses A B RTOL: run B evaluated at the same steps as run A, every validation loss
# within RTOL (relative); run A must have evaluated at least once
close_val_losses() {
  local a b
  a=$(val_losses "$(run_dir "$1")") b=$(val_losses "$(run_dir "$2")")
  if [ -z "$a" ] || [ "$(echo "$a" | cut -d' ' -f1)" != "$(echo "$b" | cut -d' ' -f1)" ]; then
    fail "$2: evaluated at steps '$(echo "$b" | cut -d' ' -f1 | tr '\n' ' ')', $1 at '$(echo "$a" | cut -d' ' -f1 | tr '\n' ' ')'"; return; fi
  local worst
  worst=$(paste -d' ' <(echo "$a") <(echo "$b") | awk -v t="$3" '
    { r = ($2 - $4) / $2; if (r < 0) r = -r; if (r > w) w = r } END { printf "%.2e", w; exit (w > t) }')
  if [ $? = 0 ]; then pass; echo "  $2: worst relative val loss difference $worst over $(echo "$a" | wc -l) evaluations (tolerance $3)";
  else fail "$2: val losses differ from $1 by $worst relative (tolerance $3)"; fi
}
# close_weights A B RTOL: final weights (loaded into the whole model) within RTOL rel. norm.
# attn.k.bias is skipped: its gradient is exactly zero in exact arithmetic (adding a constant
# to every key shifts each score row by a constant, which softmax ignores), so AdamW moves it
# by rounding noise alone, differently in every layout.
close_weights() {
  local out
  if out=$("$LOOM" ckpt compare "$(run_dir "$1")/final_checkpoint" "$(run_dir "$2")/final_checkpoint" --rtol "$3" --ignore attn.k.bias); then
    pass; echo "  $2: final weights $(echo "$out" | tail -1)";
  else fail "$2: final weights differ from $1: $(echo "$out" | tail -1)"; fi
}
# refused NP KEY TEXT overrides...: `loom train` (NP ranks; 1: without mpirun) exits non-zero
# and its message names KEY and holds TEXT (output under $WORK/refused)
refused() { # np key expected-text overrides...
  local np=$1 key=$2 want=$3; shift 3
  local out
  if [ "$np" = 1 ]; then out=$("$LOOM" train "$@" run.output_dir="$WORK/refused" --quiet 2>&1)
  else out=$(timeout 300 "${MPIRUN[@]}" -np "$np" "$LOOM" train "$@" run.output_dir="$WORK/refused" --quiet 2>&1); fi
  if [ $? != 0 ] && echo "$out" | grep -q "$key" && echo "$out" | grep -q "$want"; then pass
  else fail "$key: not refused as expected ($want): $(echo "$out" | tail -2)"; fi
}
# cores_line NAME NP: train.log of run NAME (NP ranks on this one machine, whatever their host
# names) says that they time-share the cores exactly when NP outnumbers them
cores_line() {
  local cores log; cores=$(getconf _NPROCESSORS_ONLN) log=$(run_dir "$1")/train.log
  if [ "$2" -gt "$cores" ]; then
    check "$1: train.log says $2 ranks time-share the $cores cores" \
      grep -q "cores: $2 ranks share this machine's $cores cores and time-share them; a waiting rank polls every 200 us" "$log"
  else
    check "$1: train.log has no time-sharing line ($2 ranks, $cores cores)" \
      bash -c "! grep -q 'ranks share this machine' '$log'"
  fi
}
