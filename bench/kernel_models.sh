#!/usr/bin/env bash
# Builds bench/kernel_models.c against a release build's library and runs it: the GEMM pool and
# the attention tile model of loom bench's calibration against the kernels at the shapes loom's
# own small models train with (docs/SIMULATOR.md, "GEMMs and attention as a step meets them").
# usage: bench/kernel_models.sh [build dir, default build] [rounds, default 41]
set -eu
BUILD=${1:-build}
ROUNDS=${2:-41}
OUT=$(mktemp -d /tmp/loom-kernel-models.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
bash "$(dirname "$0")/build_c.sh" "$BUILD" bench/kernel_models.c "$OUT/kernel_models"
OMP_NUM_THREADS=1 "$OUT/kernel_models" "$ROUNDS"
