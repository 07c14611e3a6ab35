#!/usr/bin/env bash
# loom-netdelay (tools/netdelay: a link's delay where the kernel has no tc netem) refuses what
# is not a queue number or a duration with a unit, with a message naming the value and exit 2,
# before it touches the kernel's queue. (The delay itself is measured on a link between two
# nodes by comm_multinode: a TCP round trip of at least 2 x D.)
# usage: netdelay_args_test.sh LOOM_NETDELAY
. "$(dirname "$0")/../assert.sh"
BIN=$1
refused() { # refused WHAT PATTERN ARGS...: exit 2 and a message matching PATTERN
  local what=$1 pattern=$2; shift 2
  local out rc
  out=$("$BIN" "$@" 2>&1); rc=$?
  check "$what: exit 2 (got $rc)" test "$rc" = 2
  check "$what: says '$pattern' ($out)" grep -q -- "$pattern" <<<"$out"
}
refused "no arguments" "usage: loom-netdelay --queue N --delay D"
refused "no delay" "usage:" --queue 0
refused "no queue" "usage:" --delay 2ms
refused "a delay without its unit" "--delay '2' is not a duration" --queue 0 --delay 2
refused "a zero delay" "--delay '0ms' is not a duration" --queue 0 --delay 0ms
refused "a negative delay" "--delay '-1ms' is not a duration" --queue 0 --delay -1ms
refused "a delay over a minute" "--delay '61s' is not a duration" --queue 0 --delay 61s
refused "an unknown unit" "--delay '2min' is not a duration" --queue 0 --delay 2min
refused "a queue out of range" "--queue '65536' is not a queue number" --queue 65536 --delay 2ms
refused "a queue that is not a number" "--queue 'q1' is not a queue number" --queue q1 --delay 2ms
refused "an unknown option" "usage:" --queue 0 --delay 2ms --jitter 1ms
finish
