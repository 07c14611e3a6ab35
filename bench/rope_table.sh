#!/usr/bin/env bash
# Builds bench/rope_table.c against a release build's library and runs it: loom's table-driven
# RoPE against the per-call rotation it replaced, medians of R rounds in turns, one thread.
# usage: bench/rope_table.sh [build dir, default build] [rounds, default 21]
set -eu
BUILD=${1:-build}
ROUNDS=${2:-21}
OUT=$(mktemp -d /tmp/loom-rope.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
bash "$(dirname "$0")/build_c.sh" "$BUILD" bench/rope_table.c "$OUT/rope_table"
OMP_NUM_THREADS=1 "$OUT/rope_table" "$ROUNDS"
