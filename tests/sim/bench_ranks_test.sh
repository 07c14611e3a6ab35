#!/usr/bin/env bash
# `loom bench --nproc N` measures the devices on every rank that has a core of its own, at once
# (as a training job's ranks run), and the profile keeps the slowest rank's measurements: the
# log lists each measuring rank's rates' geometric mean and names the kept rank, which must be
# the one with the lowest; with more ranks than cores only the first `cores` measure (an
# oversubscribed bench would time-share the cores); a bench of the collectives alone
# (--only mpi) measures no device and keeps the profile it updates, and says how many ranks
# shared a core while it timed them. The instruction peaks
# (--only peak) measure the whole machine from rank 0 alone (a team of threads on every core,
# the other ranks asleep), and every rank takes them: the profile has the all-core entry.
# usage: bench_ranks_test.sh LOOM
. "$(dirname "$0")/../assert.sh"
LOOM=$1
WORK=$(mktemp -d /tmp/loom-benchranks.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
cores=$(getconf _NPROCESSORS_ONLN) # (nproc would honour OMP_NUM_THREADS)
np=$((cores + 1))
want=$((np < cores ? np : cores))
out=$("$LOOM" bench --nproc $np --only memory,vector --quick --out "$WORK/p.yaml" 2>&1); rc=$?
check "loom bench --nproc $np exits 0" [ "$rc" = 0 ]
line=$(grep "devices measured on" <<<"$out")
echo "  $line"
check "the first $want of $np ranks measure ($cores cores)" \
  grep -q "devices measured on $want ranks at once" <<<"$line"
# the kept rank is a listed one with the lowest geometric mean (two ranks may print the same
# 6 digits: then either is the slowest as far as the log can tell)
read -r kept kept_rate lowest listed <<<"$(python3 -c "
import re, sys
l = sys.argv[1]
rates = {int(r): float(v) for r, v in re.findall(r' (\d+): ([0-9.e+-]+)', l.split(';')[0])}
kept = int(re.search(r'keeps rank (\d+)', l).group(1))
print(kept, rates.get(kept, -1), min(rates.values()), len(rates))" "$line")"
check "the kept rank ($kept, $kept_rate) is the slowest listed ($lowest)" [ "$kept_rate" = "$lowest" ]
check "$want ranks listed" [ "$listed" = "$want" ]
check "the profile is written" grep -q "vector_kernel_rates\|layernorm_fwd" "$WORK/p.yaml"
cp "$WORK/p.yaml" "$WORK/before.yaml"
out=$("$LOOM" bench --nproc 2 --only mpi --quick --out "$WORK/p.yaml" 2>&1); rc=$?
check "--only mpi exits 0" [ "$rc" = 0 ]
check "--only mpi measures no device" test -z "$(grep 'devices measured' <<<"$out")"
check "--only mpi measures the all-reduce by size" grep -q "all_reduce_size_factor: \[\[" "$WORK/p.yaml"
# a step's gradient reduction runs once, on an idle link: the sizes from 4 MB timed one at a time
check "--only mpi times the all-reduce's 4, 8 and 16 MB one at a time" grep -Eq \
  "all-reduce +\(2 ranks\): 4194304 B [0-9.]+ us, 8388608 B [0-9.]+ us, 16777216 B [0-9.]+ us one at a time" \
  <<<"$out"
# the profile's all-reduce time (SIMULATOR.md: ring bytes at bandwidth x efficiency x the
# size's factor, plus 2 (p-1) latencies) meets every time the bench logged, to its 0.1 us;
# where the factor is clamped (a time below the latencies' floor, or 20x slower than the
# line) the simulated time lies on the clamp's side
echo "$out" >"$WORK/mpi.log"
worst=$(python3 - "$WORK/p.yaml" "$WORK/mpi.log" <<'PY'
import re, sys
log = open(sys.argv[2]).read()
net = open(sys.argv[1]).read().split("\nnetwork:")[1]
bw = float(re.search(r"\n\s+bandwidth_gbs: ([0-9.e+-]+)", net).group(1)) * 1e9
lat = float(re.search(r"latency_us: ([0-9.e+-]+)", net).group(1)) * 1e-6
eff = float(re.search(r"all_reduce: ([0-9.e+-]+)", net).group(1))
pts = eval(re.search(r"all_reduce_size_factor: (\[.*\])", net).group(1))
logged = {}
for line in re.findall(r"mpi all-reduce +\(2 ranks\):(.*)", log):
    for b, us in re.findall(r"(\d+) B ([0-9.]+) us", line):
        logged[int(b)] = float(us)
worst, n = 0, 0
for mb, f in pts:
    b = round(mb * 1e6)
    if b not in logged:
        worst = 1e9
        continue
    sim = (b / (bw * eff * f) + 2 * lat) * 1e6  # 2 ranks: the ring moves b, 2 steps
    tol = 0.05 + 1e-3 * logged[b]  # the log's 0.1 us, the profile's digits
    if f >= 20:  # clamped: a time below the latencies' floor, which no factor reaches
        excess = logged[b] - sim - tol
    elif f <= 0.05:  # clamped: slower than 20x the line
        excess = sim - logged[b] - tol
    else:
        excess = abs(sim - logged[b]) - tol
    worst, n = max(worst, excess), n + 1
print("%.3f %d" % (worst, n))
PY
)
check "the profile's all-reduce meets the logged times (excess, sizes: $worst)" \
  python3 -c "import sys; w, n = sys.argv[1].split(); sys.exit(not (float(w) <= 0 and n == '6'))" "$worst"
# the collectives timed with every rank in them at once: a profile says how many ranks shared a
# core meanwhile (the simulator does not slow those times again for as much time-sharing);
# with a core each the key is left out
check "--nproc 2 on $cores cores writes no collective_ranks_per_core" \
  test -z "$([ "$cores" -ge 2 ] && grep collective_ranks_per_core "$WORK/p.yaml")"
cp "$WORK/p.yaml" "$WORK/shared.yaml"
out=$("$LOOM" bench --nproc $np --only mpi --quick --out "$WORK/shared.yaml" 2>&1); rc=$?
check "--only mpi on $np ranks exits 0" [ "$rc" = 0 ]
got=$(sed -n 's/^  collective_ranks_per_core: //p' "$WORK/shared.yaml")
check "$np ranks on $cores cores: collective_ranks_per_core ${got:-absent}" python3 -c "
import sys; n, c, g = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
want = n / c if n > c else 1
sys.exit(not ((g == '' and want == 1) or (g != '' and abs(float(g) - want) < 1e-12)))" "$np" "$cores" "$got"
check "loom sim loads it and runs 4 time-shared ranks on it" "$LOOM" sim model.preset=tiny-gpt2 \
  parallel.dp=2 parallel.tp=2 --hardware "$WORK/shared.yaml" --gpus 4
# the profile as a user then uses it
check "loom sim loads the profile" "$LOOM" sim model.preset=tiny-gpt2 parallel.dp=2 \
  --hardware "$WORK/p.yaml" --gpus 2
check "--only mpi keeps the device rates it updates" \
  test "$(grep layernorm_fwd "$WORK/p.yaml")" = "$(grep layernorm_fwd "$WORK/before.yaml")"
# the instruction peaks under mpirun: rank 0 alone, 1 thread and every core
cp "$WORK/p.yaml" "$WORK/before.yaml"
out=$("$LOOM" bench --nproc 2 --only peak --quick --out "$WORK/p.yaml" 2>&1); rc=$?
check "--only peak under mpirun exits 0" [ "$rc" = 0 ]
if grep -q "^peak: no instruction peak measured" <<<"$out"; then
  echo "  skipped: this CPU has no FMA unit"
else
  check "--only peak under mpirun: measured by rank 0 alone" \
    grep -q "under mpirun: measured by rank 0 alone, the other ranks asleep" <<<"$out"
  want_threads=$([ "$cores" -gt 1 ] && echo "1, $cores" || echo 1)
  check "--only peak under mpirun: threads [$want_threads] in the profile" \
    grep -q "^    threads: \[$want_threads\]" "$WORK/p.yaml"
  check "--only peak keeps the device rates it updates" \
    test "$(grep layernorm_fwd "$WORK/p.yaml")" = "$(grep layernorm_fwd "$WORK/before.yaml")"
fi
finish
