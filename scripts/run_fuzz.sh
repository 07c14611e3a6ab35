#!/usr/bin/env bash
# Runs every libFuzzer harness built in BUILD_DIR (by `make fuzz`) for SECONDS each, starting
# from its seed corpus and its regression inputs, and prints one line per harness. New inputs
# go to BUILD_DIR/fuzz-corpus/<target>/ (never into the source tree); a crash, a leak, a
# sanitizer report, an allocation over the limit or a FINDING is saved as
# BUILD_DIR/fuzz-findings/<target>-crash-* and makes the script exit 1.
# usage: scripts/run_fuzz.sh BUILD_DIR SECONDS
set -u
build=${1:?usage: $0 BUILD_DIR SECONDS}
seconds=${2:?usage: $0 BUILD_DIR SECONDS}
src=$(cd "$(dirname "$0")/.." && pwd)
targets=$(cat "$build/fuzz_targets.txt" 2>/dev/null | tr ';' ' ')
[ -n "$targets" ] || { echo "run_fuzz: no harnesses listed in $build/fuzz_targets.txt (run 'make fuzz')" >&2; exit 2; }
mkdir -p "$build/fuzz-findings" "$build/fuzz-logs"
failed=0
printf '%-16s %10s %8s  %s\n' harness runs seconds result
for t in $targets; do
  corpus="$build/fuzz-corpus/$t"
  mkdir -p "$corpus"
  log="$build/fuzz-logs/$t.log"
  # -rss_limit_mb / -malloc_limit_mb: an input that makes loom allocate more than 2 GiB is a
  # finding (limits must be checked before allocating); -timeout: one input may take 30 s.
  seeds=()  # libFuzzer stops on a corpus folder that does not exist (git keeps no empty folder)
  for d in "$src/tests/fuzz/corpus/$t" "$src/tests/fuzz/regress/$t"; do [ -d "$d" ] && seeds+=("$d"); done
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
  "$build/fuzz_$t" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=3072 -malloc_limit_mb=2048 \
    -artifact_prefix="$build/fuzz-findings/$t-" -print_final_stats=1 \
    "$corpus" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  secs=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [ $rc -eq 0 ]; then result=ok; else result="FAILED (exit $rc; see $log)"; failed=1; fi
  printf '%-16s %10s %8s  %s\n' "$t" "${runs:-?}" "$seconds" "$result"
  [ $rc -eq 0 ] || grep -m3 -E "ERROR|FINDING|SUMMARY" "$log" | sed 's/^/    /'
done
exit $failed
