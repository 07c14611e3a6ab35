# Sourced by the timing benchmarks: wait_quiet waits (up to 30 min) until the machine is idle
# (>= 90% of all CPUs idle over 2 s, from /proc/stat) when QUIET is set; on a machine shared with
# other work timings otherwise measure the load, not the code.
idle_fraction() { # idle share of all CPUs over 2 s, from /proc/stat
  local a b
  a=($(head -1 /proc/stat)); sleep 2; b=($(head -1 /proc/stat))
  local total=0 i
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  python3 -c "print(($((b[4] - a[4])) + $((b[5] - a[5]))) / max(1, $total))"
}
wait_quiet() {
  [ -n "${QUIET:-}" ] || return 0
  local waited=0
  while [ "$waited" -lt 1800 ]; do
    python3 -c "import sys; sys.exit(0 if $(idle_fraction) >= 0.9 else 1)" && return 0
    sleep 5; waited=$((waited + 7))
  done
  echo "(the machine stayed busy: timings below are inflated)" >&2
}
