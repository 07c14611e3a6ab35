#!/usr/bin/env bash
# Builds bench/coll_beside_compute.c and runs it on 2 cores (taskset -c 0,1) with one pair of
# ranks (each a core: the collective alone) and with two pairs (2 ranks a core, the pairs'
# collectives beside each other's compute), in turns, and prints what one collective adds to an
# iteration in each, and their ratio. The simulator prices a layer's collective of a group
# holding only some of a node's time-shared ranks as timed alone (ratio 1), the compute and the
# collectives of every rank slowed by the sharing (ratio 2) (src/sim/cost_ops.c,
# docs/SIMULATOR.md "A layer's collectives beside other ranks' compute").
# usage: bench/coll_beside_compute.sh [build dir, default build] [runs, default 3] [rounds, default 5]
set -eu
BUILD=${1:-build}
RUNS=${2:-3}
ROUNDS=${3:-5}
[ "$(getconf _NPROCESSORS_ONLN)" -ge 2 ] || { echo "needs 2 cores" >&2; exit 2; }
OUT=$(mktemp -d /tmp/loom-beside.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
bash "$(dirname "$0")/build_c.sh" "$BUILD" bench/coll_beside_compute.c "$OUT/beside"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for run in $(seq "$RUNS"); do # in turns: each run one pair, then two pairs
  for np in 2 4; do
    taskset -c 0,1 mpirun --oversubscribe --bind-to none -np "$np" "$OUT/beside" "$ROUNDS" \
      >"$OUT/np$np-$run.txt" || { echo "the $np-rank run failed" >&2; exit 1; }
  done
done
python3 - "$OUT" "$RUNS" <<'PY'
import statistics as st, sys
out, runs = sys.argv[1], int(sys.argv[2])
def rows(np):  # (kind, MB, work ms) -> [added ms of each run]
    r = {}
    for run in range(1, runs + 1):
        for line in open("%s/np%d-%d.txt" % (out, np, run)):
            kind, mb, w, added, alone = line.split()
            r.setdefault((kind, mb, w), []).append(float(added))
    return r
one, two = rows(2), rows(4)
print("%-11s %7s %8s %16s %16s %7s" % ("collective", "MB", "work ms", "alone: adds ms", "beside: adds ms", "ratio"))
ratios = []
for k in one:
    a, b = st.median(one[k]), st.median(two[k])
    if a > 0:  # a collective that added nothing measurable alone has no ratio
        ratios.append(b / a)
    print("%-11s %7s %8s %16.3f %16.3f %7s" % (k[0], k[1], k[2], a, b, "%.2f" % (b / a) if a > 0 else "-"))
print("median ratio %s over %d of %d rows (1: priced as timed alone; 2: slowed as the compute); medians of %d runs"
      % ("%.2f" % st.median(ratios) if ratios else "-", len(ratios), len(one), runs))
PY
