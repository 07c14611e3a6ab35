#!/usr/bin/env bash
# `loom bench --nproc N` measures the devices on every rank that has a core of its own, at once
# (as a training job's ranks run), and the profile keeps the slowest rank's measurements: the
# log lists each measuring rank's rates' geometric mean and names the kept rank, which must be
# the one with the lowest; with more ranks than cores only the first `cores` measure (an
# oversubscribed bench would time-share the cores); a bench of the collectives alone
# (--only mpi) measures no device and keeps the profile it updates.
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
# the kept rank is the listed one with the lowest geometric mean
read -r kept lowest listed <<<"$(python3 -c "
import re, sys
l = sys.argv[1]
pairs = [(float(v), int(r)) for r, v in re.findall(r' (\d+): ([0-9.e+]+)', l.split(';')[0])]
kept = int(re.search(r'keeps rank (\d+)', l).group(1))
print(kept, min(pairs)[1], len(pairs))" "$line")"
check "the kept rank ($kept) is the slowest listed ($lowest)" [ "$kept" = "$lowest" ]
check "$want ranks listed" [ "$listed" = "$want" ]
check "the profile is written" grep -q "vector_kernel_rates\|layernorm_fwd" "$WORK/p.yaml"
cp "$WORK/p.yaml" "$WORK/before.yaml"
out=$("$LOOM" bench --nproc 2 --only mpi --quick --out "$WORK/p.yaml" 2>&1); rc=$?
check "--only mpi exits 0" [ "$rc" = 0 ]
check "--only mpi measures no device" test -z "$(grep 'devices measured' <<<"$out")"
check "--only mpi measures the all-reduce by size" grep -q "all_reduce_size_factor: \[\[" "$WORK/p.yaml"
check "--only mpi keeps the device rates it updates" \
  test "$(grep layernorm_fwd "$WORK/p.yaml")" = "$(grep layernorm_fwd "$WORK/before.yaml")"
finish
