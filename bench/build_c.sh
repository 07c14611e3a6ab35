#!/usr/bin/env bash
# Compiles one bench/*.c program against a release build's library, linked as the loom binary
# is (its own libraries after its main object), and prints the CPU line the tables name. The
# programs may include the private kernel headers (-Isrc).
# usage: bench/build_c.sh BUILD_DIR SOURCE.c OUTPUT [OBJECT.o ...]   (objects linked beside the
#        program, before the library; exit 2 without a release build)
set -eu
BUILD=$1 SRC=$2 OUTPUT=$3
shift 3
LINK="$BUILD/CMakeFiles/loom.dir/link.txt"
[ -f "$BUILD/libloomlib.a" ] && [ -f "$LINK" ] ||
  { echo "no release build in $BUILD: run 'make' first" >&2; exit 2; }
LIBS=$(sed 's/.*-o loom *//' "$LINK" | sed "s#libloomlib.a#$BUILD/libloomlib.a#")
gcc -O2 -fopenmp -Iinclude -Isrc "$SRC" "$@" $LIBS -lm -o "$OUTPUT"
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') ($(getconf _NPROCESSORS_ONLN) cores, AMX: $(grep -c amx_bf16 /proc/cpuinfo || true)), $(date -u +%F)"
