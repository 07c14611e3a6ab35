#!/usr/bin/env bash
# Builds bench/gemm_amx.c against a release build's library and runs it: loom's AMX bf16 GEMM
# against oneDNN's at every GEMM shape of a GPT-2 124M 8x1024 and a Qwen2.5-0.5B 4x512 step
# (docs/PERFORMANCE.md, "bf16 on AMX"). On a CPU without AMX it says so and exits 0.
# usage: bench/gemm_amx.sh [build dir, default build] [rounds, default 5] [threads, default 1]
#        [AMX instruction peak GFLOP/s at that thread count (loom bench --only peak), default 0:
#        shares of it not shown]
set -eu
BUILD=${1:-build}
ROUNDS=${2:-5}
THREADS=${3:-1}
PEAK=${4:-0}
OUT=$(mktemp -d /tmp/loom-gemm-amx.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
bash "$(dirname "$0")/build_c.sh" "$BUILD" bench/gemm_amx.c "$OUT/gemm_amx"
OMP_NUM_THREADS=$THREADS "$OUT/gemm_amx" "$ROUNDS" "$PEAK"
