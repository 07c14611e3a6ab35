#!/usr/bin/env bash
# A training run killed with SIGKILL shows as crashed in the registry: while it runs its
# heartbeat advances and it stays "running"; once killed, `loom runs` marks it crashed (its
# process is gone; the heartbeat-timeout path is covered by test_registry.c). The heartbeat
# interval is shortened through LOOM_HEARTBEAT_INTERVAL so the test is fast.
. "$(dirname "$0")/../experiments.sh"
make_data || { echo "could not make test data"; exit 1; }
LOOM_HEARTBEAT_INTERVAL=0.1 "$LOOM" train "$WORK/base.yaml" training.steps=100000000 run.name=victim \
  --quiet > /dev/null 2>&1 &
PID=$!
R=(--runs-dir "$WORK/runs" --filter "name = 'victim'" --format csv)
field() { "$LOOM" runs "${R[@]}" --show "$1" 2>/dev/null | sed -n 2p; }
for _ in $(seq 100); do [ "$(field steps)" != "" ] && break; sleep 0.1; done
check "registered as running" test "$(field status)" = running
s1=$(field steps); sleep 0.5; s2=$(field steps)
check "heartbeat advances the step while it runs ($s1 -> $s2)" test "${s2:-0}" -gt "${s1:-0}"
check "a live run is not declared crashed" test "$("$LOOM" runs "${R[@]}" --heartbeat-timeout 5 --show status | sed -n 2p)" = running
kill -9 $PID
wait $PID 2>/dev/null
check "killed run shows as crashed" test "$(field status)" = crashed
check "crash reason recorded" grep -q "is gone" <<< "$(field error)"
check "end time set to the last heartbeat" test -n "$(field end_time)"
check "crashed runs can be filtered" test "$("$LOOM" runs --runs-dir "$WORK/runs" --filter "status = 'crashed'" --format csv --show name | sed -n 2p)" = victim
finish
