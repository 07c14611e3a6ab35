#!/usr/bin/env bash
# loom's AMX GEMM of the working tree against the same file at a git revision, in one process
# (bench/gemm_amx_ab.c): each src/kernels/gemm_amx.c compiled with its public names prefixed,
# linked beside a release build's library. For a change to the kernel: the two alternate call
# by call, so the machine's speed moves both alike. Exits 1 if the two results differ in a bit.
# On a CPU without AMX it says so and exits 0.
# usage: bench/gemm_amx_ab.sh [build dir, default build] [revision, default HEAD] [rounds,
#        default 15] [threads, default 1]
set -eu
BUILD=${1:-build}
REV=${2:-HEAD}
ROUNDS=${3:-15}
THREADS=${4:-1}
OUT=$(mktemp -d /tmp/loom-gemm-amx-ab.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
git show "$REV:src/kernels/gemm_amx.c" >"$OUT/base.c" ||
  { echo "no src/kernels/gemm_amx.c at revision $REV" >&2; exit 2; }
cp src/kernels/gemm_amx.c "$OUT/this.c"
for v in base this; do
  gcc -O2 -fopenmp -Iinclude -Isrc -Dgemm_amx_bf16=${v}_gemm_amx_bf16 \
    -Dgemm_amx_bf16_w=${v}_gemm_amx_bf16_w -Dgemm_amx_weights_changed=${v}_gemm_amx_weights_changed \
    -c "$OUT/$v.c" -o "$OUT/$v.o"
done
LINK="$BUILD/CMakeFiles/loom.dir/link.txt"
[ -f "$BUILD/libloomlib.a" ] && [ -f "$LINK" ] ||
  { echo "no release build in $BUILD: run 'make' first" >&2; exit 2; }
LIBS=$(sed 's/.*-o loom *//' "$LINK" | sed "s#libloomlib.a#$BUILD/libloomlib.a#")
gcc -O2 -fopenmp -Iinclude -Isrc bench/gemm_amx_ab.c "$OUT/base.o" "$OUT/this.o" $LIBS -lm \
  -o "$OUT/gemm_amx_ab"
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') ($(getconf _NPROCESSORS_ONLN) cores, AMX: $(grep -c amx_bf16 /proc/cpuinfo || true)), $(date -u +%F); base $(git rev-parse --short "$REV"), this: the working tree"
OMP_NUM_THREADS=$THREADS "$OUT/gemm_amx_ab" "$ROUNDS"
