#!/usr/bin/env bash
# The simulator against a measured link between nodes: two nodes of scripts/nodes.sh (network
# namespaces on this machine, 2 ranks each), node 1's link shaped by tc tbf to a few rates.
# For each link: `loom bench --only mpi` across the nodes measures it (two tiers: shared memory
# inside a node, the network between nodes) into a profile; `loom sim` predicts dp2 x tp2 and
# pp2 x dp2 on 2 nodes of that profile; `loom train` across the nodes measures them (fastest
# step of REPEAT runs but each run's first step, as bench/sim_vs_train.sh does). Every profile
# is taken once a round and every row run once a round, in REPEAT rounds (default 5): a row's
# "measured" is its fastest step over the rounds, "(rounds)" the range of the rounds' fastest,
# and "predicted" the median of the rounds' profiles' simulations. The reference
# "one node" row runs all 4 ranks in node 0 (shared memory only) against the profile of
# `loom bench --nproc 2`. "link share" is the part of the step the network adds over one node:
# (T - T_one_node) / T, measured and predicted.
#
# Both nodes share this machine's cores, so the simulation keeps the calibrated node (its cores
# as devices, the 4 ranks time-sharing them: `--gpus 4`) and only the network differs: the
# profile's tiers put a node's 2 ranks (domain 2) on shared memory and anything wider on the
# measured link. Root only. Takes ~8 minutes on 2 cores; timings on a shared machine are noisy
# (the load average is printed: other work only ever adds time).
#
# usage: bench/multinode_sim.sh [path/to/loom] [--repeat R] [--steps S] [--rates "1gbit 5gbit"]
#        (default rates: 1gbit 5gbit 20gbit native; a rate above what the unshaped link carries
#        measures that link: the "link" column says what loom bench read)
# env:   QUIET=1  before each calibration and run, wait (up to 30 min) until the machine is idle
#                 (>= 90% idle over 2 s), as bench/sim_vs_train.sh does
set -u
LOOM=${1:-build/loom}
shift || true
REPEAT=5 STEPS=6 RATES="1gbit 5gbit 20gbit native"
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

# run_once LAUNCHER... -- overrides: one run; prints its timed steps (each but the first)
run_once() {
  local launcher=()
  while [ "$1" != -- ]; do launcher+=("$1"); shift; done
  shift
  wait_quiet
  rm -rf "$WORK/runs"
  timeout 900 "${launcher[@]}" "$LOOM" train "${GPT[@]}" "${COMMON[@]}" "$@" run.name=bench \
    --quiet >"$WORK/train.log" 2>&1 || { tail -3 "$WORK/train.log" >&2; return 1; }
  sed -n '2,$s/.*"step_time": \([0-9.e+-]*\),.*/\1/p' "$WORK"/runs/bench_*/metrics.jsonl
}
predict() { # PROFILE-PREFIX overrides...: the median over PREFIX-1.yaml ... PREFIX-REPEAT.yaml
  local hw=$1 preds="" i; shift
  for i in $(seq "$REPEAT"); do
    preds="$preds $("$LOOM" sim "${GPT[@]}" "${COMMON[@]}" "$@" --hardware "$hw-$i.yaml" --gpus 4 |
                   sed -n 's/^step time *\([0-9.]*\) s/\1/p')"
  done
  python3 -c "import sys, statistics as s; print(s.median(float(x) for x in sys.argv[1:]))" $preds
}
SHAPED=""
shape() { # RATE: node 1's link at RATE (native: unshaped), where it is not so already
  [ "$1" = "$SHAPED" ] && return
  if [ "$1" = native ]; then "$NODES" shape "$N1" off; else "$NODES" shape "$N1" rate "$1"; fi
  SHAPED=$1
}

# REPEAT rounds, each taking every profile once and visiting every row once in turn: the node's
# profile and the one-node rows, then for each link its profile over the node's and its rows.
# This VM's speed drifts by 10-30% over minutes, so each row's runs and each profile are spread
# over the same minutes as every other's: rows measured one after the other would differ by the
# minute they ran in, and the link share, a difference of two rows, by the drift between them.
ROWS=()
for rate in one $RATES; do
  for l in "${LAYOUTS[@]}"; do ROWS+=("$rate|$l"); done
done
declare -A LINK
echo "$REPEAT rounds: loom bench --nproc 2 (compute, shared memory) and the one-node rows, then for each link loom bench --only mpi across the nodes and its rows"
for round in $(seq "$REPEAT"); do
  for i in "${!ROWS[@]}"; do
    IFS='|' read -r rate name over <<<"${ROWS[$i]}"
    read -r -a O <<<"$over"
    if [ "$rate" = one ]; then # all in node 0: node 1's link carries nothing
      if [ ! -f "$WORK/one-$round.yaml" ]; then
        wait_quiet
        "$LOOM" bench --nproc 2 --quiet --out "$WORK/one-$round.yaml" >/dev/null || exit 1
      fi
      run_once "${ONE[@]}" -- "${O[@]}" >>"$WORK/steps-$i" || echo nan >>"$WORK/steps-$i"
    else
      shape "$rate"
      if [ ! -f "$WORK/$rate-$round.yaml" ]; then # the link over this round's node profile
        cp "$WORK/one-$round.yaml" "$WORK/$rate-$round.yaml"
        wait_quiet
        "${ACROSS[@]}" $("$NODES" mpirun-args) "$LOOM" bench --only mpi --quick --quiet \
          --out "$WORK/$rate-$round.yaml" >/dev/null || { echo "bench across the nodes failed" >&2; exit 1; }
        [ "$round" = 1 ] && LINK[$rate]=$(python3 - "$WORK/$rate-1.yaml" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
bw = re.findall(r"name: network\s+domain: 0\s+bandwidth_gbs: ([0-9.e+-]+)\s+latency_us: ([0-9.e+-]+)", t)
print(f"{float(bw[0][0]) * 8:.2f} Gbit/s {float(bw[0][1]):.0f} us" if bw else "?")
PY
)
      fi
      run_once "${ACROSS[@]}" $("$NODES" mpirun-args) -- "${O[@]}" >>"$WORK/steps-$i" ||
        echo nan >>"$WORK/steps-$i"
    fi
    echo "round $round" >>"$WORK/steps-$i"
  done
done

# the table: a row's fastest step over all rounds, and the spread of the rounds' fastest steps
fastest() { # ROW: "fastest highest-round-fastest" (the fastest is the lowest round's)
  python3 - "$WORK/steps-$1" <<'PY'
import math, sys
rounds, cur = [], []
for line in open(sys.argv[1]):
    if line.startswith("round"):
        rounds.append(min(cur) if cur else math.nan); cur = []
    elif line.strip() != "nan": # a failed run (its error went to stderr)
        cur.append(float(line))
ok = [r for r in rounds if not math.isnan(r)]
print(*(f"{x:.4f}" for x in ((min(ok), max(ok)) if ok else (math.nan,) * 2)))
PY
}
declare -A T_ONE P_ONE
printf "%-10s %-22s %10s %15s %10s %8s %10s %10s\n" layout link "measured s" "(rounds)" "predicted" \
  error "link share" "(predicted)"
for i in "${!ROWS[@]}"; do
  IFS='|' read -r rate name over <<<"${ROWS[$i]}"
  read -r -a O <<<"$over"
  read -r t hi <<<"$(fastest "$i")"
  if [ "$rate" = one ]; then
    T_ONE[$name]=$t
    P_ONE[$name]=$(predict "$WORK/one" "${O[@]}")
    python3 - "$name" "one node (shared mem.)" "$t" "$t-$hi" "${P_ONE[$name]}" <<'PY'
import sys
name, link, t, spread, p = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], float(sys.argv[5])
print(f"{name:<10s} {link:<22s} {t:10.4f} {spread:>15s} {p:10.4f} {100 * (p / t - 1):+7.1f}%")
PY
  else
    p=$(predict "$WORK/$rate" "${O[@]}")
    python3 - "$name" "$rate: ${LINK[$rate]}" "$t" "$t-$hi" "$p" "${T_ONE[$name]}" "${P_ONE[$name]}" <<'PY'
import sys
name, link, t, spread = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
p, t1, p1 = map(float, sys.argv[5:])
print(f"{name:<10s} {link:<22s} {t:10.4f} {spread:>15s} {p:10.4f} {100 * (p / t - 1):+7.1f}% "
      f"{100 * (t - t1) / t:9.1f}% {100 * (p - p1) / p:9.1f}%")
PY
  fi
done
"$NODES" shape "$N1" off
echo "(fastest of $REPEAT rounds x $((STEPS - 1)) timed steps, the rounds visiting every row in turn; load average $(cut -d' ' -f1-3 /proc/loadavg))"
