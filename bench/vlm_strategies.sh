#!/usr/bin/env bash
# Vision-language training with a parallel strategy per module, measured on this machine:
# the same small Qwen2.5-VL run (larger images, so the encoder's share is real) under each
# strategy on 2 ranks, REPEAT runs of STEPS steps, the median of each run's average step time
# (the first step of a run is not timed), peak memory of the largest rank, and the ratio to
# uniform tensor parallelism measured in the same invocation.
# Not a CTest test: timings on a shared 2-core machine are noisy.
#
# usage: bench/vlm_strategies.sh [path/to/loom] [--repeat R] [--steps S]
set -u
LOOM=${1:-build/loom}
shift || true
REPEAT=3 STEPS=6
while [ $# -gt 0 ]; do
  case $1 in
    --repeat) REPEAT=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
LOOM=$(cd "$(dirname "$LOOM")" && pwd)/$(basename "$LOOM")
WORK=$(mktemp -d /tmp/loom-vlmbench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
"$LOOM" data synth-vqa --out "$WORK/vqa" --samples 256 --shard-size 128 >/dev/null || exit 1
PX=$((224 * 224))
BASE=(model.preset=small-qwen2.5-vl model.vocab_size=384 training.seq_len=96
  training.micro_batch_size=4 training.grad_accum=2 training.steps="$STEPS" data.format=vqa
  data.vqa_path="$WORK/vqa" data.tokenizer="$WORK/vqa/tokenizer.json" data.image_min_pixels=$PX
  data.image_max_pixels=$PX checkpoint.save_final=false run.output_dir="$WORK/runs")
CASES=(
  "one process|1|"
  "uniform tp2|2|parallel.tp=2"
  "vision sp2+ZeRO-1, text tp2|2|parallel.tp=2 vision.parallel.sp=2 vision.parallel.zero=1"
  "vision tp2, text Ulysses sp2|2|parallel.sp=2 vision.parallel.tp=2"
  "uniform ZeRO-3 dp2|2|parallel.dp=2 parallel.zero=3 training.micro_batch_size=2"
  "uniform dp2|2|parallel.dp=2 training.micro_batch_size=2"
)
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
declare -A T M
for c in "${CASES[@]}"; do
  IFS='|' read -r name np extra <<<"$c"
  times=() mem=0
  for r in $(seq "$REPEAT"); do
    rm -rf "$WORK/runs"
    # shellcheck disable=SC2086
    if [ "$np" = 1 ]; then "$LOOM" train "${BASE[@]}" $extra --quiet >"$WORK/log" 2>&1
    else mpirun --oversubscribe --bind-to none -np "$np" "$LOOM" train "${BASE[@]}" $extra --quiet >"$WORK/log" 2>&1; fi ||
      { echo "$name: failed"; tail -3 "$WORK/log"; continue 2; }
    s=$(ls "$WORK"/runs/*/summary.json)
    times+=("$(sed -n 's/.*"avg_step_time": \([^,]*\),.*/\1/p' "$s")")
    mem=$(sed -n 's/.*"peak_rss_mb": \([^,}]*\).*/\1/p' "$s")
  done
  T[$name]=$(printf '%s\n' "${times[@]}" | median)
  M[$name]=$mem
done
ref=${T["uniform tp2"]:-}
printf '%-34s %5s %12s %14s %13s\n' strategy ranks "step (s)" "vs uniform tp2" "peak RSS MB"
for c in "${CASES[@]}"; do
  IFS='|' read -r name np extra <<<"$c"
  [ -n "${T[$name]:-}" ] || continue
  printf '%-34s %5s %12.3f %14s %13s\n' "$name" "$np" "${T[$name]}" \
    "$(awk -v a="${T[$name]}" -v b="$ref" 'BEGIN { if (b > 0) printf "%.2fx", b / a; else print "-" }')" "${M[$name]}"
done
echo "($REPEAT runs x $STEPS steps each, median of per-run average step time; > 1x = faster than uniform tp2)"
