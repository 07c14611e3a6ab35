#!/usr/bin/env bash
# One of loom's AMX kernels of the working tree against the same file at a git revision, in one
# process: the GEMM (src/kernels/gemm_amx.c, bench/gemm_amx_ab.c) or flash attention's products
# (src/kernels/flash_tile_amx.c, bench/flash_amx_ab.c), each revision's file compiled with its
# public names prefixed base_ / this_ and linked beside a release build's library. For a
# change to the kernel: the two alternate call by call, so the machine's speed (which moves by
# 2x within seconds on shared vCPUs) moves both alike. Exits 1 if the two results differ in a
# bit. On a CPU without AMX it says so and exits 0.
# usage: bench/amx_ab.sh gemm|flash [build dir, default build] [revision, default HEAD]
#        [rounds, default 15] [threads, default 1]
set -eu
KERNEL=${1:-}
BUILD=${2:-build}
REV=${3:-HEAD}
ROUNDS=${4:-15}
THREADS=${5:-1}
case $KERNEL in
  gemm) FILE=src/kernels/gemm_amx.c NAMES="gemm_amx_bf16 gemm_amx_bf16_w gemm_amx_weights_changed" ;;
  flash) FILE=src/kernels/flash_tile_amx.c NAMES="fb_mm_amx" ;;
  *) echo "usage: bench/amx_ab.sh gemm|flash [build] [revision] [rounds] [threads]" >&2; exit 2 ;;
esac
[ -f "$BUILD/libloomlib.a" ] || { echo "no release build in $BUILD: run 'make' first" >&2; exit 2; }
OUT=$(mktemp -d /tmp/loom-amx-ab.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
git show "$REV:$FILE" >"$OUT/base.c" || { echo "no $FILE at revision $REV" >&2; exit 2; }
cp "$FILE" "$OUT/this.c"
for v in base this; do
  DEFS=()
  for n in $NAMES; do DEFS+=("-D$n=${v}_$n"); done
  gcc -O2 -fopenmp -Iinclude -Isrc "${DEFS[@]}" -c "$OUT/$v.c" -o "$OUT/$v.o"
done
CPU=$(bash "$(dirname "$0")/build_c.sh" "$BUILD" "bench/${KERNEL}_amx_ab.c" "$OUT/ab" \
  "$OUT/base.o" "$OUT/this.o")
echo "$CPU; $FILE: base $(git rev-parse --short "$REV"), this: the working tree"
OMP_NUM_THREADS=$THREADS "$OUT/ab" "$ROUNDS"
