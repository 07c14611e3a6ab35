#!/usr/bin/env bash
# A stray job on the same nodes cannot join a running one, and the running one is not disturbed
# (2 nodes of scripts/nodes.sh x 2 ranks; job A: dp4 across them, rank 0 slowed to 100 ms a
# step so that it runs while the strays come):
# - while A runs, a second mpirun B (its own config, the same nodes, hostfile and MCA
#   parameters) trains beside it: the two have different Open MPI job ids and no TCP
#   connection joins a process of one to a process of the other;
# - a stray peer on node 1 connects to a TCP port rank 0 of A listens on and presents itself as
#   Open MPI would: garbage is dropped silently, B's job id is refused by Open MPI ("cannot
#   find a corresponding process entry"), A's own job id claiming rank 1 from node 1's address
#   (rank 1 is on node 0) is dropped;
# - a stray `loom train --resume <A's run directory>` across the nodes is refused by the run
#   directory's lock; an MPMD launch whose second part carries another LOOM_LAUNCH_ID is
#   refused by loom's check at mesh start, naming rank 2 on node 1;
# - A ends normally with the losses of the same run alone, bitwise; B ends normally;
# - listening sockets: every one of the jobs' processes (mpirun, orted, the ranks) lives in its
#   node's network namespace, whose interfaces are lo and eth0 only, and listens on the
#   wildcard address (Open MPI 4.1 binds its TCP transport and daemons to 0.0.0.0 and ::
#   whatever btl_tcp_if_include / oob_tcp_if_include say: they choose what is advertised) or
#   on 127.0.0.1 (PMIx); so the ports are reachable over eth0, the nodes' network, and
#   loopback, and nowhere else.
# Root only (skipped with a plain message elsewhere); the nodes are removed whatever happens.
. "$(dirname "$0")/multinode_common.sh"
make_data || { echo "could not make test data"; exit 1; }
trap 'pkill -KILL -f -- "$WORK/" 2>/dev/null; "$NODES" down >/dev/null 2>&1; rm -rf "$WORK"' EXIT

GPT2=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64
  model.intermediate=128 training.seq_len=32 training.steps=250 training.warmup_steps=2
  training.micro_batch_size=1 training.grad_accum=2 parallel.dp=4
  data.train_shards="$WORK/train.bin" checkpoint.every=100 data.val_fraction=0)
MCA=$("$NODES" mpirun-args)
envof() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n "s/^$2=//p"; }
ranks_of() { pgrep -f "^$LOOM train .* run\.name=$1 "; }
running() { ranks_of "$1" >/dev/null; }
listening_in_both() { # every rank of run $1 listens (its TCP transport is up on both nodes)
  [ "$(for n in "$N0" "$N1"; do "$NODES" exec "$n" ss -ltnpH; done |
       grep -c '"loom"')" -ge 8 ] && [ "$(ranks_of "$1" | wc -l)" = 4 ]
}

echo "A alone, across the nodes"
train_nodes ref "${GPT2[@]}" || { finish; exit 1; }

echo "A again, with strays beside it"
LOOM_FAULT=slow:0:1 "${MPI_NODES[@]}" $MCA "$LOOM" train "${GPT2[@]}" run.name=A \
  run.output_dir="$WORK/runs" --quiet >"$WORK/A.log" 2>&1 &
JOB_A=$!
wait_for "A: every rank listening" 90 listening_in_both A || { finish; exit 1; }
for p in $(ranks_of A); do [ "$(envof "$p" OMPI_COMM_WORLD_RANK)" = 0 ] && A0=$p; done
JOBID_A=$(envof "$A0" OMPI_MCA_ess_base_jobid)

# the listening sockets while A runs
for n in "$N0" "$N1"; do
  links=$("$NODES" exec "$n" ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort |
    paste -sd' ')
  check "$n: its interfaces are lo and eth0 only ($links)" test "$links" = "eth0 lo"
  "$NODES" exec "$n" ss -ltnpH >"$WORK/listen_$n.txt"
  bad=$(awk '{print $4}' "$WORK/listen_$n.txt" | grep -vE '^(0\.0\.0\.0|\[::\]|\*|127\.0\.0\.1):[0-9]+$')
  check "$n: the jobs listen on the wildcard or 127.0.0.1 only ($(wc -l <"$WORK/listen_$n.txt") sockets${bad:+; not: $bad})" \
    test -z "$bad"
  echo "  $n listens on: $(awk '{print $4}' "$WORK/listen_$n.txt" | sed 's/:[0-9]*$//' | sort |
    uniq -c | awk '{print $2" x"$1}' | paste -sd' ')"
done
ns0=$(stat -L -c %i "/run/netns/$N0") ns1=$(stat -L -c %i "/run/netns/$N1")
outside=0
for p in $(ranks_of A) $(pgrep -f "^orted .*tcp://${NET//./\\.}\.1[,:]") \
  $(pgrep -f "^mpirun .* run\.name=A "); do
  i=$(stat -L -c %i "/proc/$p/ns/net" 2>/dev/null) || continue
  [ "$i" = "$ns0" ] || [ "$i" = "$ns1" ] || { outside=1; echo "  pid $p is outside the nodes"; }
done
check "A's ranks, mpirun and the daemons all run inside the node namespaces" test $outside = 0

echo "B, a second mpirun on the same nodes"
"${MPI_NODES[@]}" $MCA "$LOOM" train "${GPT2[@]}" training.steps=30 run.seed=7 run.name=B \
  run.output_dir="$WORK/runs" --quiet >"$WORK/B.log" 2>&1 &
JOB_B=$!
wait_for "B: step 3" 90 eval 'grep -qs "\"step\": 3," "$(run_dir B 2>/dev/null)/metrics.jsonl"'
B0=$(ranks_of B | head -1)
JOBID_B=$(envof "$B0" OMPI_MCA_ess_base_jobid)
check "A and B have different Open MPI job ids ($JOBID_A, $JOBID_B)" \
  test -n "$JOBID_A" -a -n "$JOBID_B" -a "$JOBID_A" != "$JOBID_B"
# every established TCP connection in the nodes: the jobs of the processes at both ends
cross() {
  local pids=""
  for p in $(ranks_of A); do pids+="$p:A "; done
  for p in $(ranks_of B); do pids+="$p:B "; done
  for n in "$N0" "$N1"; do "$NODES" exec "$n" ss -tnpH state established; done |
    grep -v "127\.0\.0\.1:\|\[::1\]:" | python3 -c '
import re, sys
job = dict(x.split(":") for x in sys.argv[1].split())
own, conns = {}, []
for line in sys.stdin:
    f = line.split()
    m = re.search(r"pid=(\d+)", line)
    if len(f) < 4 or not m: continue
    local, peer, pid = f[2], f[3], m.group(1)
    own[local] = pid
    conns.append((pid, peer))
seen = bad = 0
for pid, peer in conns:
    if pid in job and own.get(peer) in job:
        seen += 1
        bad += job[pid] != job[own[peer]]
print(seen, bad)' "$pids"
}
read -r seen crossed < <(cross)
check "no TCP connection joins A and B ($seen between their ranks, $crossed across)" \
  test "${seen:-0}" -gt 0 -a "${crossed:-1}" = 0
echo "  Open MPI job ids: A $JOBID_A, B $JOBID_B; $seen connections between ranks, none across"

echo "a stray peer on $N1 at rank 0 of A's TCP port"
port=$("$NODES" exec "$N0" ss -ltnpH | grep "pid=$A0," | awk '$4 ~ /^0\.0\.0\.0:/ {print $4}' |
  sed 's/.*://' | head -1)
# probe garbage | probe JOBID VPID: connect from node 1 and send garbage, or the handshake of
# Open MPI 4.1's TCP transport (the process name, job id and rank in network byte order, then
# the 16-byte magic string); "closed" when the rank hangs up
probe() {
  "$NODES" exec "$N1" python3 -c '
import socket, struct, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
if sys.argv[3] == "garbage": s.sendall(b"GET / HTTP/1.0\r\nHost: loom\r\n\r\n")
else: s.sendall(struct.pack("!II", int(sys.argv[3]), int(sys.argv[4])) + b"OPAL-TCP-BTL".ljust(16, b"\0"))
s.settimeout(10)
try: print("closed" if s.recv(100) == b"" else "answered")
except OSError as e: print("closed" if isinstance(e, ConnectionResetError) else "no answer")
' "$NET.1" "$port" "$@" 2>&1
}
got=$(probe garbage)
check "garbage: the connection is closed ($got)" test "$got" = closed
got=$(probe "$JOBID_B" 0)
check "B's job id: the connection is closed ($got)" test "$got" = closed
# Open MPI's warning: its text goes from the rank to mpirun, which in Open MPI 4.1.4 at times
# fails to unpack it ("ORTE_ERROR_LOG: Data unpack would read past end of buffer in file
# .../show_help.c"); either says the rank reported the refused connection
said() { grep -q "cannot find a corresponding process\|ORTE_ERROR_LOG: .*show_help\.c" "$WORK/A.log"; }
wait_for "Open MPI's report of B's job id in A" 15 said && pass
grep -q "cannot find a corresponding process" "$WORK/A.log" &&
  echo "  A: Open MPI accepted a TCP connection ... but cannot find a corresponding process entry" ||
  echo "  A: $(grep -m1 'ORTE_ERROR_LOG: .*show_help' "$WORK/A.log") (the warning, lost in forwarding)"
got=$(probe "$JOBID_A" 1)
check "A's job id claiming rank 1 from $N1: the connection is closed ($got)" test "$got" = closed

echo "a stray --resume of A's run directory, and a launch with another LOOM_LAUNCH_ID"
D=$(run_dir A)
wait_for "A: checkpoint 100" 120 test -f "$D/checkpoint_100/COMPLETE"
"${MPI_NODES[@]}" $MCA "$LOOM" train --resume "$D" --quiet >"$WORK/resume.log" 2>&1
check "--resume of the running A: refused" test $? != 0
if grep -q "is in use by another loom job" "$WORK/resume.log"; then pass
else fail "--resume of the running A: the run is in use by another job"; grep -v "^ *$" "$WORK/resume.log" | head -5 >&2; fi
"$NODES" exec "$N0" timeout 120 mpirun --bind-to none --hostfile "$HOSTFILE" $MCA \
  -np 2 "$LOOM" train "${GPT2[@]}" run.name=mpmd run.output_dir="$WORK/runs" --quiet : \
  -np 2 -x LOOM_LAUNCH_ID=stray "$LOOM" train "${GPT2[@]}" run.name=mpmd \
  run.output_dir="$WORK/runs" --quiet >"$WORK/mpmd.log" 2>&1
check "a second LOOM_LAUNCH_ID: refused" test $? != 0
check "a second LOOM_LAUNCH_ID: names rank 2 on $N1" grep -q \
  "error: rank 2 on $N1 belongs to another launch (Open MPI job [0-9]*, LOOM_LAUNCH_ID stray) than rank 0 on $N0" \
  "$WORK/mpmd.log"
check "A was still running through all of it" running A

wait $JOB_B
check "B ends normally (rc $?)" test $? = 0
wait $JOB_A
rc=$?
check "A ends normally (rc $rc)" test $rc = 0
a=$(losses "$D") r=$(losses "$(run_dir ref)")
if [ -n "$a" ] && [ "$a" = "$r" ]; then
  pass; echo "  A: $(echo "$a" | wc -l) losses, bitwise those of A alone (last $(echo "$a" | tail -1))"
else fail "A's losses differ from A alone's"; fi
if grep -qF "nodes: $N0: ranks 0-1, $N1: ranks 2-3" "$D/train.log"; then pass
else fail "A's placement line: its own 4 ranks"; grep nodes: "$D/train.log" >&2; fi
finish
