#!/usr/bin/env bash
# Builds bench/kernel_models.c against a release build's library and runs it: the GEMM pool and
# the attention tile model of loom bench's calibration against the kernels at the shapes loom's
# own small models train with (docs/SIMULATOR.md, "GEMMs and attention as a step meets them").
# usage: bench/kernel_models.sh [build dir, default build] [rounds, default 41]
set -eu
BUILD=${1:-build}
ROUNDS=${2:-41}
LINK="$BUILD/CMakeFiles/loom.dir/link.txt"
[ -f "$BUILD/libloomlib.a" ] && [ -f "$LINK" ] ||
  { echo "no release build in $BUILD: run 'make' first" >&2; exit 2; }
OUT=$(mktemp -d /tmp/loom-kernel-models.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
# the loom binary's own libraries, after its main object
LIBS=$(sed 's/.*-o loom *//' "$LINK" | sed "s#libloomlib.a#$BUILD/libloomlib.a#")
gcc -O2 -fopenmp -Iinclude bench/kernel_models.c $LIBS -lm -o "$OUT/kernel_models"
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') ($(getconf _NPROCESSORS_ONLN) cores), $(date -u +%F)"
OMP_NUM_THREADS=1 "$OUT/kernel_models" "$ROUNDS"
