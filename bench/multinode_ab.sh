#!/usr/bin/env bash
# Two loom builds side by side across nodes: 4 ranks on this machine's cores, across two nodes of
# scripts/nodes.sh (network namespaces, TCP between them) and on one node (shared memory),
# pp2 x dp2 and dp2 x tp2. BASE is a build of an earlier commit (in a worktree), NEW this tree's:
# e.g. 2d5e82b against the polling nap of 200 us where ranks outnumber the cores, 61c77b2
# against the pipeline's sends polled after every block (docs/PERFORMANCE.md). Each layout runs
# REPEAT times with each build, alternating; a run's figure is the median of its steps 2-8, a
# cell the median over the runs, and the ratio NEW / BASE (below 1: faster). Root only
# (namespaces). ~3 minutes on 2 cores.
#
# usage: bench/multinode_ab.sh BASE_LOOM [NEW_LOOM] [--repeat R]
# env:   QUIET=1  wait for an idle machine before each run (bench/quiet.sh)
set -u
BASE=${1:?usage: bench/multinode_ab.sh BASE_LOOM [NEW_LOOM] [--repeat R]}
shift
NEW=build/loom
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then NEW=$1; shift; fi
REPEAT=3
while [ $# -gt 0 ]; do
  case $1 in
    --repeat) REPEAT=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || { echo "--repeat $REPEAT: give a count >= 1" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
for b in "$BASE" "$NEW"; do [ -x "$b" ] || { echo "no loom at $b" >&2; exit 1; }; done
BASE=$(cd "$(dirname "$BASE")" && pwd)/$(basename "$BASE")
NEW=$(cd "$(dirname "$NEW")" && pwd)/$(basename "$NEW")
NODES=$(cd "$(dirname "$0")/../scripts" && pwd)/nodes.sh
WORK=$(mktemp -d /tmp/loom-pollnap.XXXXXX)
export LOOM_NODES=p$$
trap '"$NODES" down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
"$NODES" up 2 2 >/dev/null || exit 1
. "$(dirname "$0")/quiet.sh"
HOSTS=/run/loom-nodes/$LOOM_NODES.hosts
N0=$LOOM_NODES-node0

"$NEW" data synth-text --out "$WORK/corpus.txt" --bytes 400000 --seed 3 >/dev/null &&
"$NEW" data train-tokenizer --vocab-size 512 --out "$WORK/tok.json" "$WORK/corpus.txt" >/dev/null &&
"$NEW" data tokenize --tokenizer "$WORK/tok.json" --out "$WORK/train.bin" "$WORK/corpus.txt" >/dev/null ||
  { echo "could not make the data" >&2; exit 1; }
# the model of bench/multinode_sim.sh
GPT=(model.preset=tiny-gpt2 model.vocab_size=512 model.layers=4 model.hidden=256 model.heads=4
  model.intermediate=1024 training.seq_len=64 training.micro_batch_size=4 training.steps=8
  training.warmup_steps=1 data.train_shards=$WORK/train.bin checkpoint.every=0
  checkpoint.save_final=false run.output_dir=$WORK/runs)
LAYOUTS=("pp2 x dp2|parallel.pp=2 parallel.dp=2 parallel.schedule=1f1b training.grad_accum=2"
  "dp2 x tp2|parallel.dp=2 parallel.tp=2 training.grad_accum=1")

# run LOOM WHERE LAYOUT-OVERRIDES: the median of steps 2-8, s
run() {
  local loom=$1 where=$2; shift 2
  local launch=(mpirun --bind-to none -np 4 --hostfile "$HOSTS" $("$NODES" mpirun-args))
  [ "$where" = one ] && launch=(mpirun --bind-to none --oversubscribe -np 4)
  wait_quiet
  rm -rf "$WORK/runs"
  "$NODES" exec "$N0" "${launch[@]}" "$loom" train "${GPT[@]}" "$@" run.name=x --quiet \
    >"$WORK/run.log" 2>&1 || { echo "failed"; return; }
  python3 -c "
import glob, json
t = sorted(json.loads(l)['step_time'] for l in open(glob.glob('$WORK/runs/x_*/metrics.jsonl')[0])
           if '\"step_time\"' in l)[1:]
print('%.4f' % t[len(t) // 2])"
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

printf '%-10s %-9s %-24s %-24s %s\n' layout nodes "base s (runs)" "new s (runs)" "new/base"
for entry in "${LAYOUTS[@]}"; do
  name=${entry%%|*}
  read -ra over <<<"${entry#*|}"
  for where in across one; do
    b="" n=""
    for _ in $(seq "$REPEAT"); do
      b="$b $(run "$BASE" $where "${over[@]}")"
      n="$n $(run "$NEW" $where "${over[@]}")"
    done
    if [[ "$b$n" == *failed* ]]; then
      printf '%-10s %-9s failed (%s)\n' "$name" "$where" "$(tail -1 "$WORK/run.log")"
      continue
    fi
    mb=$(median <<<"$b") mn=$(median <<<"$n")
    printf '%-10s %-9s %-24s %-24s %.3f\n' "$name" "$where" "$mb ($(echo $b | tr ' ' ,))" \
      "$mn ($(echo $n | tr ' ' ,))" "$(python3 -c "print($mn / $mb)")"
  done
done
echo "(4 ranks on $(getconf _NPROCESSORS_ONLN) cores; $(lscpu | sed -n 's/^Model name: *//p'))"
