#!/usr/bin/env bash
# The simulator against this machine: calibrate with `loom bench`, then for each strategy run
# `mpirun -np N loom train` REPEAT times for STEPS steps, simulate the same config with
# `loom sim --hardware <the profile>`, and print predicted vs measured with the error.
# "measured" is the fastest step of all runs but each run's first (warm-up) step: on a machine
# shared with other work, other load only ever adds time, so the fastest step is the best
# estimate of the step alone (the median is printed next to it).
# Not a CTest test: timings on a shared machine are noisy (the CTest suite asserts only what is
# deterministic: instruction order, bytes per collective, memory). Takes ~15 minutes on 2 cores.
# The "long llama" cases are the step-time half of tests/sim/sim_vs_train_cp_test.py (context
# parallelism on 2048-token sequences); the "moe" cases compare loom's own MoE runs (expert
# parallelism over MPI; a case the trainer refuses is reported as failed with its message;
# with the experts split over ranks the simulation gets the routing the runs had: "ep load",
# the busiest rank's routed pairs over the mean rank's from metrics.jsonl, as --moe-imbalance).
#
# usage: bench/sim_vs_train.sh [path/to/loom] [--repeat R] [--steps S] [--only REGEX]
# env:   PROFILE=FILE  use this profile instead of calibrating (loom bench --nproc 2)
#        NICE=N        run bench and training at this niceness
#        CALS=N        calibrations (default 3): each is a `loom bench --nproc 2` of ~5 s, whose
#                      rates move 1.5-2x now and then on shared vCPUs (other tenants' memory
#                      traffic); the prediction is the median over the N profiles' simulations
#        PAIRED=1      calibrate before every run (one `loom bench --nproc 2`) and hold each run
#                      against the profile taken seconds before it: the error is the median of
#                      the runs' errors (predicted / the run's fastest step), "predicted" the
#                      median prediction and "(range)" their spread. The machine's speed drifts
#                      by 10-20% over minutes on shared vCPUs; pairing each run with its own
#                      calibration takes that drift out of the comparison
#        RECAL=1       calibrate again before each case (into the same profiles): where the
#                      machine's speed drifts over the minutes a run of cases takes (shared
#                      vCPUs), each case is predicted from a profile of the minutes it runs in
#        ROUNDS=N      N rounds, each one `loom bench --nproc 2` and then one run of every case in
#                      turn (--repeat is not used): a case's "measured" is its fastest step over the
#                      rounds, "predicted" the median of the N rounds' profiles. The VM's speed
#                      drifts by 10-40% over minutes; the rounds spread every case's runs and every
#                      profile over the same minutes, so a case run at a slow minute is not held
#                      against the calibrations of a fast one (as bench/multinode_sim.sh does)
#        KEEP=DIR      (with ROUNDS) keep each case's timed steps in DIR/steps-N, a line a round
#        QUIET=1       before calibrating and before each run, wait (up to 30 min) until the
#                      machine is idle (>= 90% idle over 2 s): on a shared machine other
#                      work otherwise inflates the measured times (the "load" column shows
#                      the 1-minute load average after each case)
set -u
CALS=${CALS:-3}
[[ $CALS =~ ^[1-9][0-9]*$ ]] || { echo "CALS=$CALS: give a number of calibrations >= 1" >&2; exit 2; }
LOOM=${1:-build/loom}
shift || true
REPEAT=3 STEPS=5 ONLY=.
while [ $# -gt 0 ]; do
  case $1 in
    --repeat) REPEAT=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -n "${ROUNDS:-}" ]; then
  [[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS=$ROUNDS: give a number of rounds >= 1" >&2; exit 2; }
  [ -n "${PAIRED:-}${RECAL:-}${PROFILE:-}" ] && { echo "ROUNDS takes its own profiles: unset PAIRED, RECAL and PROFILE" >&2; exit 2; }
  [ -z "${KEEP:-}" ] || mkdir -p "$KEEP" || { echo "KEEP=$KEEP: cannot make that directory" >&2; exit 2; }
fi
LOOM=$(cd "$(dirname "$LOOM")" && pwd)/$(basename "$LOOM")
WORK=$(mktemp -d /tmp/loom-simbench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN=(mpirun --oversubscribe --bind-to none)
PRIO=()
[ -n "${NICE:-}" ] && PRIO=(nice -n "$NICE")
. "$(dirname "$0")/quiet.sh" # wait_quiet: QUIET=1 waits for an idle machine

"$LOOM" data synth-text --out "$WORK/corpus.txt" --bytes 400000 --seed 3 >/dev/null &&
"$LOOM" data train-tokenizer --vocab-size 512 --out "$WORK/tok.json" "$WORK/corpus.txt" >/dev/null &&
"$LOOM" data tokenize --tokenizer "$WORK/tok.json" --out "$WORK/train.bin" "$WORK/corpus.txt" >/dev/null ||
  { echo "could not make the data" >&2; exit 1; }

PROFILE=${PROFILE:-}
PROFILES=()
calibrate() {
  for p in "${PROFILES[@]}"; do
    wait_quiet
    "${PRIO[@]}" "$LOOM" bench --nproc 2 --out "$p" --quiet || exit 1
  done
}
if [ -n "${ROUNDS:-}" ]; then
  : # each round takes its own profile
elif [ -n "${PAIRED:-}" ]; then
  PROFILE="one per run"
elif [ -z "$PROFILE" ]; then
  for i in $(seq "$CALS"); do PROFILES+=("$WORK/this-machine-$i.yaml"); done
  PROFILE="${PROFILES[0]}"
  [ "$CALS" -gt 1 ] && PROFILE="$WORK/this-machine-{1..$CALS}.yaml (median)"
  echo "calibrating $CALS times: loom bench --nproc 2 --out $WORK/this-machine-N.yaml"
  calibrate
else
  PROFILES=("$PROFILE")
  unset RECAL # the given profile stands
fi

# GPT-2 style, 4 layers of width 256 (4 heads of 64), 128 tokens, 4 micro-batches of 4
GPT=(model.preset=tiny-gpt2 model.vocab_size=512 model.layers=4 model.hidden=256 model.heads=4
  model.intermediate=1024 training.seq_len=128 training.micro_batch_size=4 training.grad_accum=4)
# Llama style: GQA (4 heads, 2 kv heads), SwiGLU, rotary, untied head
LLAMA=(model.preset=tiny-llama model.vocab_size=512 model.layers=4 model.hidden=256 model.heads=4
  model.kv_heads=2 model.intermediate=704 training.seq_len=128 training.micro_batch_size=4
  training.grad_accum=4)
# Llama of hidden 128, one 2048-token sequence per micro-batch: the ring's exchanges and the
# per-chunk compute of context parallelism
LONG=(model.preset=tiny-llama model.vocab_size=512 model.layers=2 model.hidden=128 model.heads=4
  model.kv_heads=2 model.intermediate=256 model.max_seq=2048 training.seq_len=2048
  training.micro_batch_size=1 training.grad_accum=2)
# tiny Qwen3-MoE (8 experts, top 2): the router, the dispatch/combine all-to-alls and the
# experts' GEMMs of loom's executor
MOE=(model.preset=tiny-qwen3-moe model.vocab_size=512 model.layers=4 training.seq_len=128
  training.micro_batch_size=4 training.grad_accum=2)
COMMON=(training.steps=$STEPS training.warmup_steps=1 data.train_shards=$WORK/train.bin
  checkpoint.every=0 checkpoint.save_final=false run.output_dir=$WORK/runs)

# name | ranks | model | overrides
CASES=(
  "dp2|2|GPT|parallel.dp=2"
  "dp2 zero1|2|GPT|parallel.dp=2 parallel.zero=1"
  "dp2 zero2|2|GPT|parallel.dp=2 parallel.zero=2"
  "dp2 zero3|2|GPT|parallel.dp=2 parallel.zero=3"
  "tp2|2|GPT|parallel.tp=2"
  "tp2 megatron-sp|2|GPT|parallel.tp=2 parallel.sp_mode=megatron"
  "ulysses sp2|2|GPT|parallel.sp=2"
  "pp2 1f1b|2|GPT|parallel.pp=2 parallel.schedule=1f1b"
  "pp2 gpipe|2|GPT|parallel.pp=2 parallel.schedule=gpipe"
  "pp2 vpp2 interleaved|2|GPT|parallel.pp=2 parallel.vpp=2 parallel.schedule=interleaved"
  "dp2 bf16|2|GPT|parallel.dp=2 training.dtype=bf16"
  "dp2 recompute|2|GPT|parallel.dp=2 training.activation_checkpointing=true"
  "llama tp2|2|LLAMA|parallel.tp=2"
  "dp4|4|GPT|parallel.dp=4"
  "dp2 tp2|4|GPT|parallel.dp=2 parallel.tp=2"
  "pp4 1f1b|4|GPT|parallel.pp=4 parallel.schedule=1f1b"
  "pp2 tp2|4|GPT|parallel.pp=2 parallel.tp=2"
  "dp2 pp2 tp2 zero1|8|GPT|parallel.dp=2 parallel.pp=2 parallel.tp=2 parallel.zero=1"
  "dp8|8|GPT|parallel.dp=8"
  "ulysses sp2 tp2|4|GPT|parallel.sp=2 parallel.tp=2"
  "cp2|2|GPT|parallel.cp=2"
  "llama cp2|2|LLAMA|parallel.cp=2"
  "cp4|4|GPT|parallel.cp=4"
  "cp2 tp2|4|GPT|parallel.cp=2 parallel.tp=2"
  "long llama cp1|1|LONG|"
  "long llama cp2|2|LONG|parallel.cp=2"
  "long llama cp4|4|LONG|parallel.cp=4"
  "long llama cp2 tp2|4|LONG|parallel.cp=2 parallel.tp=2"
  "moe dp2|2|MOE|parallel.dp=2"
  "moe ep2|2|MOE|parallel.dp=2 parallel.ep=2"
  "moe ep4|4|MOE|parallel.dp=4 parallel.ep=4"
  "moe ep2 zero1|2|MOE|parallel.dp=2 parallel.ep=2 parallel.zero=1"
  "moe tp2|2|MOE|parallel.tp=2"
  "moe tp2 folded ep2|2|MOE|parallel.tp=2 parallel.etp=1 parallel.ep=2"
  "moe ep2 tp2|4|MOE|parallel.dp=2 parallel.ep=2 parallel.tp=2"
  "moe pp2 ep2|4|MOE|parallel.pp=2 parallel.dp=2 parallel.ep=2"
)

# imbalance LOADS...: the routing the runs had (loom sim --moe-imbalance: one factor, the mean
# over layers and steps, as the stretched costs are linear in it); none without expert parallelism
imbalance() {
  [ $# -gt 0 ] && echo --moe-imbalance "$(python3 -c "import sys; a=[float(x) for x in sys.argv[1:]]; print('%.4f' % (sum(a) / len(a)))" "$@")"
}
# predict PROFILE LOADS...: loom sim's step time for the case in M, COMMON, O on np ranks
predict() {
  local hw=$1; shift
  "$LOOM" sim "${M[@]}" "${COMMON[@]}" "${O[@]}" --hardware "$hw" --gpus "$np" $(imbalance "$@") |
    sed -n 's/^step time *\([0-9.]*\) s/\1/p'
}
# pick_case CASE: sets name, np, M (the model) and O (the overrides); fails where --only skips it
pick_case() {
  local model over
  IFS='|' read -r name np model over <<<"$1"
  echo "$name" | grep -Eq "$ONLY" || return 1
  case $model in
    GPT) M=("${GPT[@]}") ;;
    LLAMA) M=("${LLAMA[@]}") ;;
    LONG) M=("${LONG[@]}") ;;
    MOE) M=("${MOE[@]}") ;;
  esac
  read -r -a O <<<"$over"
}
# train_once: one `loom train` of the selected case; sets run_steps (its timed steps, each but
# the first) and run_loads (with the experts split over ranks: the busiest rank's routed pairs
# over the mean rank's, per MoE layer and timed step, metrics.jsonl's moe_ep_load)
train_once() {
  wait_quiet
  rm -rf "$WORK/runs"
  if ! timeout 900 "${PRIO[@]}" "${MPIRUN[@]}" -np "$np" "$LOOM" train "${M[@]}" "${COMMON[@]}" "${O[@]}" \
      run.name=bench --quiet >"$WORK/train.log" 2>&1; then
    echo "$name: training failed:" >&2; tail -3 "$WORK/train.log" >&2; return 1
  fi
  run_steps=$(sed -n '2,$s/.*"step_time": \([0-9.e+-]*\),.*/\1/p' "$WORK"/runs/bench_*/metrics.jsonl)
  run_loads=$(python3 -c "import json, sys
for line in list(open(sys.argv[1]))[1:]:
    print(*json.loads(line).get('moe_ep_load', []))" "$WORK"/runs/bench_*/metrics.jsonl)
}
# row STEPS LOADS PREDS RATIOS: the case's line of the table (each argument a list in one word);
# RATIOS empty: the error is the median prediction over the fastest step
n=0 within=0 failed=0
# failed_row: the line of a case whose training failed (its message went to stderr)
failed_row() {
  failed=$((failed + 1))
  printf "%-26s %5s %s\n" "$name" "$np" "training failed (its message above)"
}
# the summary's note of the cases that failed, where any did
failed_note() {
  [ "$failed" = 0 ] || echo "; $failed more failed to train"
}
row() {
  local steps=$1 loads=$2 preds=$3 ratios=$4 imb best median pred spread err ok
  imb=($(imbalance $loads))
  # the fastest and median step; the median prediction and its range; the error: the median of
  # RATIOS, or without them the median prediction over the fastest step; within 15% or not
  read -r best median pred spread err ok <<<"$(python3 - "$steps" "$preds" "$ratios" <<'PY'
import statistics as s, sys
steps, preds, ratios = ([float(x) for x in a.split()] for a in sys.argv[1:4])
best, pred = min(steps), s.median(preds)
ratio = s.median(ratios) if ratios else pred / best
spread = "%.3f-%.3f" % (min(preds), max(preds)) if len(preds) > 1 else "-"
print(best, s.median(steps), pred, spread, "%+.1f%%" % (100 * (ratio - 1)), int(abs(ratio - 1) <= 0.15))
PY
)"
  n=$((n + 1)) within=$((within + ok))
  printf "%-26s %5s %12.4f %12.4f %12.4f %13s %8s %6s %s\n" "$name" "$np" "$best" "$median" "$pred" "$spread" "$err" \
    "$(cut -d' ' -f1 /proc/loadavg)" "${imb[1]:-}"
}
header() {
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  printf "%-26s %5s %12s %12s %12s %13s %8s %6s %s\n" "strategy" "ranks" "measured s" "(median)" "predicted s" "(range)" "error" "load" "ep load"
}

if [ -n "${ROUNDS:-}" ]; then
  # ROUNDS rounds, each one calibration and then one run of every case in turn: every case's runs
  # and every profile are spread over the same minutes, as bench/multinode_sim.sh's rounds
  declare -A FAILED # cases whose training failed: not run again
  for round in $(seq "$ROUNDS"); do
    wait_quiet
    "${PRIO[@]}" "$LOOM" bench --nproc 2 --out "$WORK/round-$round.yaml" --quiet >/dev/null || exit 1
    i=0
    for c in "${CASES[@]}"; do
      i=$((i + 1))
      pick_case "$c" || continue
      [ -n "${FAILED[$i]:-}" ] && continue
      if train_once; then
        echo $run_steps >>"$WORK/steps-$i"
        echo $run_loads >>"$WORK/loads-$i"
      else
        FAILED[$i]=1
      fi
    done
  done
  header
  i=0
  for c in "${CASES[@]}"; do
    i=$((i + 1))
    pick_case "$c" || continue
    [ -n "${FAILED[$i]:-}" ] && { failed_row; continue; }
    loads=$(cat "$WORK/loads-$i") preds=""
    for round in $(seq "$ROUNDS"); do preds="$preds $(predict "$WORK/round-$round.yaml" $loads)"; done
    row "$(cat "$WORK/steps-$i")" "$loads" "$preds" ""
  done
  [ -z "${KEEP:-}" ] || cp "$WORK"/round-*.yaml $(ls "$WORK"/steps-* 2>/dev/null) "$KEEP"/ ||
    echo "KEEP=$KEEP: could not keep the steps there" >&2
  echo "$within of $n strategies within 15% (profiles: one loom bench --nproc 2 a round, median; fastest of $ROUNDS rounds x $((STEPS - 1)) timed steps, each round running every case once in turn)$(failed_note)"
  exit 0
fi

header
for c in "${CASES[@]}"; do
  pick_case "$c" || continue
  [ -n "${RECAL:-}" ] && calibrate >/dev/null
  steps="" loads="" preds="" ratios=""
  for r in $(seq "$REPEAT"); do
    if [ -n "${PAIRED:-}" ]; then
      wait_quiet
      "${PRIO[@]}" "$LOOM" bench --nproc 2 --out "$WORK/paired.yaml" --quiet >/dev/null || exit 1
    fi
    train_once || { failed_row; continue 2; }
    steps="$steps $run_steps" loads="$loads $run_loads"
    if [ -n "${PAIRED:-}" ]; then # this run against the profile taken just before it
      p=$(predict "$WORK/paired.yaml" $run_loads)
      preds="$preds $p"
      ratios="$ratios $(python3 -c "import sys; print(float(sys.argv[1]) / min(float(x) for x in sys.argv[2:]))" "$p" $run_steps)"
    fi
  done
  if [ -z "${PAIRED:-}" ]; then
    for p in "${PROFILES[@]}"; do preds="$preds $(predict "$p" $loads)"; done
  fi
  row "$steps" "$loads" "$preds" "$ratios"
done
if [ -n "${PAIRED:-}" ]; then
  echo "$within of $n strategies within 15% (each run against a loom bench --nproc 2 taken just before it; error: the median over $REPEAT runs of predicted / the run's fastest of $((STEPS - 1)) timed steps)$(failed_note)"
else
  echo "$within of $n strategies within 15% (profile: $PROFILE; fastest of $REPEAT runs x $((STEPS - 1)) timed steps)$(failed_note)"
fi
