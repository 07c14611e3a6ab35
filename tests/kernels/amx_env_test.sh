#!/usr/bin/env bash
# LOOM_AMX takes 0 or 1: anything else is refused before any kernel runs (exit 2, a message
# naming the value and the choices), on every CPU (the value is read before CPUID is asked).
# usage: amx_env_test.sh PATH/TO/test_gemm_amx
set -u
fail=0
for bad in yes 2 ""; do
  out=$(LOOM_AMX="$bad" "$1" 2>&1)
  rc=$?
  if [ -z "$bad" ]; then # empty: not 0 or 1 either
    want="LOOM_AMX= is not 0 or 1"
  else
    want="LOOM_AMX=$bad is not 0 or 1"
  fi
  if [ "$rc" != 2 ] || ! grep -qF "$want" <<<"$out" || ! grep -qF "leave it unset" <<<"$out"; then
    echo "FAIL: LOOM_AMX='$bad': exit $rc, output: $out"
    fail=1
  fi
done
# 0 is accepted: the AMX kernel test then says plainly that it did not run (exit 77)
out=$(LOOM_AMX=0 "$1" 2>&1)
rc=$?
if [ "$rc" != 77 ] || ! grep -q "SKIPPED" <<<"$out"; then
  echo "FAIL: LOOM_AMX=0: exit $rc, output: $out"
  fail=1
fi
[ $fail = 0 ] && echo "amx_env_test: ok"
exit $fail
