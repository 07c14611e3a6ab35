#!/usr/bin/env bash
# The simulator against a measured link between nodes: two nodes of scripts/nodes.sh (network
# namespaces on this machine, 2 ranks each), node 1's link shaped by tc tbf to a few rates.
# For each link: `loom bench --only mpi` across the nodes measures it (two tiers: shared memory
# inside a node, the network between nodes) into a profile; `loom sim` predicts dp2 x tp2 and
# pp2 x dp2 on 2 nodes of that profile; `loom train` across the nodes measures them (fastest
# step of REPEAT runs but each run's first step, as bench/sim_vs_train.sh does). The reference
# "one node" row runs all 4 ranks in node 0 (shared memory only) against the profile of
# `loom bench --nproc 2`. "link share" is the part of the step the network adds over one node:
# (T - T_one_node) / T, measured and predicted.
#
# Both nodes share this machine's cores, so the simulation keeps the calibrated node (its cores
# as devices, the 4 ranks time-sharing them: `--gpus 4`) and only the network differs: the
# profile's tiers put a node's 2 ranks (domain 2) on shared memory and anything wider on the
# measured link. Root only. Takes ~7 minutes on 2 cores; timings on a shared machine are noisy
# (the load average is printed: other work only ever adds time).
#
# usage: bench/multinode_sim.sh [path/to/loom] [--repeat R] [--steps S] [--rates "1gbit 5gbit"]
#        (default rates: 1gbit 5gbit 20gbit native; a rate above what the unshaped link carries
#        measures that link: the "link" column says what loom bench read)
# env:   QUIET=1  before each calibration and run, wait (up to 30 min) until the machine is idle
#                 (>= 90% idle over 2 s), as bench/sim_vs_train.sh does
#        CALS=N   calibrations (default 3; bench/sim_vs_train.sh says why): every profile (the
#                 node's, then each link's over it) is taken N times and a prediction is the
#                 median of the N simulations
set -u
CALS=${CALS:-3}
[[ $CALS =~ ^[1-9][0-9]*$ ]] || { echo "CALS=$CALS: give a number of calibrations >= 1" >&2; exit 2; }
LOOM=${1:-build/loom}
shift || true
REPEAT=2 STEPS=6 RATES="1gbit 5gbit 20gbit native"
while [ $# -gt 0 ]; do
  case $1 in
    --repeat) REPEAT=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --rates) RATES=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
LOOM=$(cd "$(dirname "$LOOM")" && pwd)/$(basename "$LOOM")
NODES=$(cd "$(dirname "$0")/../scripts" && pwd)/nodes.sh
WORK=$(mktemp -d /tmp/loom-mnbench.XXXXXX)
export LOOM_NODES=b$$
N0=$LOOM_NODES-node0 N1=$LOOM_NODES-node1
trap '"$NODES" down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
"$NODES" up 2 2 >/dev/null || exit 1
. "$(dirname "$0")/quiet.sh" # wait_quiet: QUIET=1 waits for an idle machine
HOSTS=/run/loom-nodes/$LOOM_NODES.hosts
ACROSS=("$NODES" exec "$N0" mpirun --bind-to none -np 4 --hostfile "$HOSTS")
ONE=("$NODES" exec "$N0" mpirun --bind-to none --oversubscribe -np 4)

"$LOOM" data synth-text --out "$WORK/corpus.txt" --bytes 400000 --seed 3 >/dev/null &&
"$LOOM" data train-tokenizer --vocab-size 512 --out "$WORK/tok.json" "$WORK/corpus.txt" >/dev/null &&
"$LOOM" data tokenize --tokenizer "$WORK/tok.json" --out "$WORK/train.bin" "$WORK/corpus.txt" >/dev/null ||
  { echo "could not make the data" >&2; exit 1; }

# GPT-2 style, 4 layers of width 256: 13 MB of fp32 gradients, short sequences so that the
# gradient reduction is a real part of the step
GPT=(model.preset=tiny-gpt2 model.vocab_size=512 model.layers=4 model.hidden=256 model.heads=4
  model.intermediate=1024 training.seq_len=64 training.micro_batch_size=4)
COMMON=(training.steps=$STEPS training.warmup_steps=1 data.train_shards=$WORK/train.bin
  checkpoint.every=0 checkpoint.save_final=false run.output_dir=$WORK/runs)
LAYOUTS=("dp2 x tp2|parallel.dp=2 parallel.tp=2 training.grad_accum=1"
  "pp2 x dp2|parallel.pp=2 parallel.dp=2 parallel.schedule=1f1b training.grad_accum=2")

echo "calibrating $CALS times: loom bench --nproc 2 (compute, shared memory)"
for i in $(seq "$CALS"); do
  wait_quiet
  "$LOOM" bench --nproc 2 --quiet --out "$WORK/base-$i.yaml" >/dev/null || exit 1
done

# measure LAUNCHER... -- overrides: the fastest timed step of REPEAT runs
measure() {
  local launcher=() steps=""
  while [ "$1" != -- ]; do launcher+=("$1"); shift; done
  shift
  for _ in $(seq "$REPEAT"); do
    wait_quiet
    rm -rf "$WORK/runs"
    timeout 900 "${launcher[@]}" "$LOOM" train "${GPT[@]}" "${COMMON[@]}" "$@" run.name=bench \
      --quiet >"$WORK/train.log" 2>&1 || { tail -3 "$WORK/train.log" >&2; echo nan; return; }
    steps="$steps $(sed -n '2,$s/.*"step_time": \([0-9.e+-]*\),.*/\1/p' "$WORK"/runs/bench_*/metrics.jsonl)"
  done
  python3 -c "import sys; print(min(float(x) for x in sys.argv[1:]))" $steps
}
predict() { # PROFILE-PREFIX overrides...: the median over PREFIX-1.yaml ... PREFIX-CALS.yaml
  local hw=$1 preds="" i; shift
  for i in $(seq "$CALS"); do
    preds="$preds $("$LOOM" sim "${GPT[@]}" "${COMMON[@]}" "$@" --hardware "$hw-$i.yaml" --gpus 4 |
                   sed -n 's/^step time *\([0-9.]*\) s/\1/p')"
  done
  python3 -c "import sys, statistics as s; print(s.median(float(x) for x in sys.argv[1:]))" $preds
}

declare -A T_ONE P_ONE
printf "%-10s %-22s %10s %10s %8s %10s %10s\n" layout link "measured s" "predicted" error \
  "link share" "(predicted)"
for l in "${LAYOUTS[@]}"; do
  IFS='|' read -r name over <<<"$l"
  read -r -a O <<<"$over"
  T_ONE[$name]=$(measure "${ONE[@]}" -- "${O[@]}")
  P_ONE[$name]=$(predict "$WORK/base" "${O[@]}")
  printf "%-10s %-22s %10.4f %10.4f %8s\n" "$name" "one node (shared mem.)" "${T_ONE[$name]}" \
    "${P_ONE[$name]}" "$(python3 -c "print('%+.1f%%' % (100 * (${P_ONE[$name]} / ${T_ONE[$name]} - 1)))")"
done
for rate in $RATES; do
  if [ "$rate" = native ]; then "$NODES" shape "$N1" off; else "$NODES" shape "$N1" rate "$rate"; fi
  for i in $(seq "$CALS"); do
    cp "$WORK/base-$i.yaml" "$WORK/$rate-$i.yaml"
    wait_quiet
    "${ACROSS[@]}" $("$NODES" mpirun-args) "$LOOM" bench --only mpi --quick --quiet \
      --out "$WORK/$rate-$i.yaml" >/dev/null || { echo "bench across the nodes failed" >&2; exit 1; }
  done
  link=$(python3 - "$WORK/$rate-1.yaml" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
bw = re.findall(r"name: network\s+domain: 0\s+bandwidth_gbs: ([0-9.e+-]+)\s+latency_us: ([0-9.e+-]+)", t)
print(f"{float(bw[0][0]) * 8:.2f} Gbit/s {float(bw[0][1]):.0f} us" if bw else "?")
EOF
)
  for l in "${LAYOUTS[@]}"; do
    IFS='|' read -r name over <<<"$l"
    read -r -a O <<<"$over"
    t=$(measure "${ACROSS[@]}" $("$NODES" mpirun-args) -- "${O[@]}")
    p=$(predict "$WORK/$rate" "${O[@]}")
    python3 - "$name" "$rate: $link" "$t" "$p" "${T_ONE[$name]}" "${P_ONE[$name]}" <<'EOF'
import sys
name, link, t, p, t1, p1 = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
print(f"{name:<10s} {link:<22s} {t:10.4f} {p:10.4f} {100 * (p / t - 1):+7.1f}% "
      f"{100 * (t - t1) / t:9.1f}% {100 * (p - p1) / p:9.1f}%")
EOF
  done
done
"$NODES" shape "$N1" off
echo "(fastest of $REPEAT runs x $((STEPS - 1)) timed steps; load average $(cut -d' ' -f1-3 /proc/loadavg))"
