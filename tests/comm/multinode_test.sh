#!/usr/bin/env bash
# Training across two nodes (scripts/nodes.sh: network namespaces with their own address and
# hostname, joined by a bridge; 2 ranks each, started by mpirun through scripts/node_agent.sh)
# computes what one process computes, and its traffic goes where the mesh says:
# - dp2 x tp2, pp2 x dp2 and ZeRO-3 dp4 across the nodes: every per-step loss of 20 steps within
#   1e-5 relative of one process's (fp32; the strategies only reorder sums: see
#   tests/train/parallel_equivalence_test.sh);
# - train.log's placement line names the nodes and the axes kept inside them;
# (the nodes are t<pid>-node0 and t<pid>-node1 on 10.233.X.0/24: multinode_common.sh)
# - comm.json: inter-node bytes only on the data-parallel and pipeline communicators (dp, the
#   gradient communicator "dp x cp x sp", pp and the tied-embedding "embed"), never on tp; and
#   some on each layout (the nodes really are apart);
# - over a slow link (node 1's link shaped to 20 Mbit/s both ways by tc tbf) and a lossy one
#   with delay (2 ms and 1% loss each way: tc netem, or where the kernel lacks it iptables and
#   loom-netdelay): the losses of the same layout on the unshaped link, bitwise (the link changes
#   timing, never the order of a sum), and a longer average step; the delay is there (a TCP
#   round trip between the nodes takes at least 4 ms) and packets were dropped;
# - `loom bench --only mpi` across the nodes writes two network tiers: shared memory over a
#   node's 2 ranks (domain 2) and the network between nodes (domain 0), both measured, each
#   with the time-sharing it was timed under (node 0's 2 ranks alone, all 4 at once);
#   a bench of the devices across them measures on as many ranks as the machine has cores;
# - the ranks talk over TCP between the nodes' addresses (ss shows a rank's connection from
#   node 0's address to node 1's while a run is going), and cannot without TCP: with shared memory
#   (vader) and self only, Open MPI finds no way between the nodes and the job fails.
# Root only (skipped with a plain message elsewhere); the nodes are removed whatever happens.
. "$(dirname "$0")/multinode_common.sh"
make_data || { echo "could not make test data"; exit 1; }

GPT2=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64
  model.intermediate=128 training.seq_len=32 training.steps=20 training.warmup_steps=2
  training.grad_accum=2 data.train_shards="$WORK/train.bin" checkpoint.every=0
  data.val_fraction=0)
FP32=1e-5

echo "one process"
train single 1 "${GPT2[@]}" training.micro_batch_size=4

# comm_axes NAME TP_INTRA: comm.json's split: inter-node bytes only on dp/pp communicators,
# some inter-node bytes, and (TP_INTRA=1) tp bytes all inside a node
comm_axes() {
  python3 - "$(run_dir "$1")/comm.json" "$2" "$N0" "$N1" <<'EOF'
import json, sys
ranks = json.load(open(sys.argv[1]))["bytes_per_step"]
across = {"dp", "dp x cp x sp", "pp", "embed"}
bad = [f"rank {r['rank']}: {a} sends {v['inter_node']:.0f} B/step to another node"
       for r in ranks for a, v in r["axes"].items() if v["inter_node"] > 0 and a not in across]
total = sum(r["inter_node"] for r in ranks)
if total <= 0: bad.append("no inter-node bytes at all")
if sys.argv[2] == "1" and not all(r["axes"].get("tp", {}).get("intra_node", 0) > 0 for r in ranks):
    bad.append("a rank has no intra-node tp bytes")
nodes = sorted({r["node"] for r in ranks})
print(f"  inter-node {total / 1e6:.2f} MB/step over {len(ranks)} ranks on {', '.join(nodes)}; "
      + ("; ".join(bad) if bad else "only on dp/pp communicators"))
sys.exit(1 if bad or nodes != sorted(sys.argv[3:5]) else 0)
EOF
}

# case NAME PLACEMENT TP_INTRA overrides...
case_nodes() {
  local name=$1 placement=$2 tp_intra=$3; shift 3
  echo "$name across 2 nodes x 2 ranks"
  train_nodes "$name" "${GPT2[@]}" "$@" || return
  close_losses single "$name" $FP32
  check "$name: placement line '$placement'" grep -qF "$placement" "$(run_dir "$name")/train.log"
  cores_line "$name" 4 # the two nodes' ranks share this machine (one boot id)
  check "$name: comm.json inter-node bytes on dp/pp only" comm_axes "$name" "$tp_intra"
}
case_nodes dp2_tp2 "nodes: $N0: ranks 0-1 (tp), $N1: ranks 2-3 (tp)" 1 \
  training.micro_batch_size=2 parallel.dp=2 parallel.tp=2
case_nodes pp2_dp2 "nodes: $N0: ranks 0-1 (dp), $N1: ranks 2-3 (dp)" 0 \
  training.micro_batch_size=2 parallel.pp=2 parallel.dp=2 parallel.schedule=1f1b

# The two nodes' 4 slots share this machine's CPUs: where they exceed them, a rank waiting in
# MPI yields its CPU, as Open MPI does for ranks oversubscribing one host (scripts/nodes.sh)
yield_args() { "$NODES" mpirun-args | grep -qw mpi_yield_when_idle; }
no_yield_args() { ! yield_args; }
if [ 4 -gt "$(nproc)" ]; then
  check "mpirun-args: the ranks yield when idle (4 slots on $(nproc) CPUs)" yield_args
else
  check "mpirun-args: no yield (4 slots on $(nproc) CPUs)" no_yield_args
fi

# dropped_packets: what node 1's loss dropped so far (iptables' statistic rules, or netem's
# qdiscs on both ends of its link where the kernel has netem)
dropped_packets() {
  {
    "$NODES" exec "$N1" iptables -t mangle -L -n -v -x 2>/dev/null |
      awk '$3 == "DROP" && /statistic/ {print $1}'
    { tc -s qdisc show dev "$LOOM_NODES-veth1"; "$NODES" exec "$N1" tc -s qdisc show dev eth0; } \
      2>/dev/null | awk '/^qdisc/ {netem = ($2 == "netem")} netem && /dropped/ {
        for (i = 1; i < NF; i++) if ($i == "dropped") {sub(",", "", $(i + 1)); print $(i + 1)}}'
  } | awk '{n += $1} END {print n + 0}'
}
shaped() { # NAME SHAPE...: dp2 x tp2 with node 1's link shaped
  local name=$1; shift
  "$NODES" shape "$N1" "$@" || return 1
  local t0=$SECONDS
  case_nodes "$name" "nodes: $N0: ranks 0-1 (tp), $N1: ranks 2-3 (tp)" 1 \
    training.micro_batch_size=2 parallel.dp=2 parallel.tp=2
  LAST_DROPPED=$(dropped_packets)
  "$NODES" shape "$N1" off
  local a b fast slow
  a=$(losses "$(run_dir dp2_tp2)") b=$(losses "$(run_dir "$name")")
  check "$name: the losses of dp2_tp2 on the unshaped link, bitwise" test -n "$a" -a "$a" = "$b"
  fast=$(step_time dp2_tp2) slow=$(step_time "$name")
  check "$name: slower, $slow s a step against $fast s unshaped ($((SECONDS - t0)) s in all)" \
    python3 -c "import sys; sys.exit(not float('$slow') > float('$fast'))"
  echo "  $name: losses bitwise those unshaped; $slow s a step against $fast s unshaped"
}
step_time() { sed -n 's/.*"avg_step_time": \([0-9.]*\).*/\1/p' "$(run_dir "$1")/summary.json"; }
shaped dp2_tp2_20mbit rate 20mbit
# rtt_ms: the median of 50 TCP round trips of one byte from node 0 to node 1, ms
rtt_ms() {
  "$NODES" exec "$N1" timeout 30 python3 -c "
import socket
s = socket.create_server(('$NET.2', 5999)); c, _ = s.accept()
while d := c.recv(1): c.sendall(d)" &
  local srv=$!
  "$NODES" exec "$N0" timeout 30 python3 -c "
import socket, time
for _ in range(50):
    try: c = socket.create_connection(('$NET.2', 5999)); break
    except OSError: time.sleep(0.1)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); t = []
for _ in range(50):
    t0 = time.perf_counter(); c.sendall(b'x'); c.recv(1); t.append(time.perf_counter() - t0)
print('%.3f' % (sorted(t)[25] * 1e3))"
  wait $srv 2>/dev/null
}
# bad shapes are refused with their reason, before the link changes
refused_shape() { # WANT ARGS...
  local want=$1 out rc; shift
  out=$("$NODES" shape "$N1" "$@" 2>&1); rc=$?
  check "shape $*: refused (rc $rc): $out" test $rc != 0
  check "shape $*: says '$want'" grep -qF "$want" <<<"$out"
}
refused_shape "loss '200%' is not a percentage above 0 and below 100" rate 1gbit loss 200%
refused_shape "'delay' needs a value" delay
refused_shape "'jitter' is not rate, delay, loss or off" jitter 1ms
check "after the refusals node 1's link is unshaped" bash -c \
  "! tc qdisc show dev '$LOOM_NODES-veth1' | grep -q 'tbf\|netem' &&
   ! '$NODES' exec '$N1' iptables -t mangle -S | grep -q -- '-A '"
"$NODES" shape "$N1" delay 2ms loss 1% >"$WORK/shape.log" 2>&1 ||
  { fail "nodes.sh shape delay 2ms loss 1%: $(cat "$WORK/shape.log")"; }
rtt=$(rtt_ms)
echo "  TCP round trip node 0 -> node 1 with 2 ms each way: $rtt ms"
check "the delay is on the link: round trip $rtt ms >= 4 ms" \
  python3 -c "import sys; sys.exit(not float('$rtt') >= 4.0)"
shaped dp2_tp2_lossy rate 20mbit delay 2ms loss 1%
check "the loss is on the link: $LAST_DROPPED packets dropped" test "${LAST_DROPPED:-0}" -gt 0
echo "  dp2_tp2_lossy: $LAST_DROPPED packets dropped by the 1% loss"

# ZeRO-3 over all four ranks, watching the connections while it runs
echo "zero3_dp4 across 2 nodes x 2 ranks (and the TCP connections between the nodes)"
train_nodes zero3_dp4 "${GPT2[@]}" training.micro_batch_size=1 parallel.dp=4 parallel.zero=3 &
job=$!
seen=0
while kill -0 $job 2>/dev/null; do
  if "$NODES" exec "$N0" ss -tnp 2>/dev/null |
     grep -E "${NET//./\\.}\\.1:[0-9]+ +${NET//./\\.}\\.2:[0-9]+ .*\"loom\"" >"$WORK/ss.txt"; then
    seen=1
  fi
  [ $seen = 1 ] && break
  sleep 0.2
done
if wait $job; then
  close_losses single zero3_dp4 $FP32
  check "zero3_dp4: comm.json inter-node bytes on dp/pp only" comm_axes zero3_dp4 0
else
  fail "zero3_dp4: training across the nodes failed"; tail -5 "$WORK/zero3_dp4.log" >&2
fi
check "a rank on $N0 has a TCP connection to $NET.2 ($N1)" test $seen = 1
[ $seen = 1 ] && echo "  $(head -1 "$WORK/ss.txt" | awk '{print $4, "->", $5, $6}')"

echo "loom bench across the nodes: the link between them as the profile's outer tier"
if "${MPI_NODES[@]}" $("$NODES" mpirun-args) "$LOOM" bench --only mpi --quick --quiet \
  --out "$WORK/hw.yaml" >"$WORK/bench.log" 2>&1; then
  tiers=$(python3 - "$WORK/hw.yaml" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
print(" ".join(f"{n}:{d}:{float(b) > 0}" for n, d, b in re.findall(
    r"- name: (\S+)\s+domain: (\d+)\s+bandwidth_gbs: ([0-9.e+-]+)", t)))
EOF
)
  check "bench: tiers shared-memory-mpi (domain 2) and network (domain 0): $tiers" \
    test "$tiers" = "shared-memory-mpi:2:True network:0:True"
  # the time-sharing each tier's times hold: inside a node timed with node 0's 2 ranks alone
  # (2 over the cores, at least 1), the network with all 4 at once (4 over the cores)
  sharing=$(python3 - "$WORK/hw.yaml" "$(getconf _NPROCESSORS_ONLN)" <<'EOF'
import re, sys
t, cores = open(sys.argv[1]).read(), int(sys.argv[2])
got = [float(x) for x in re.findall(r"\n    ranks_per_core: ([0-9.e+-]+)", t.split("\nnetwork:")[1])]
want = [max(1, 2 / cores), max(1, 4 / cores)]
print(got, want, "ok" if got == want else "differ")
EOF
)
  check "bench: each tier's ranks_per_core (got, want): $sharing" test "${sharing##* }" = ok
  # as a user then uses it: dp2 x tp2 on its 2 nodes of 2 ranks
  check "loom sim of dp2 x tp2 on the profile" "$LOOM" sim model.preset=tiny-gpt2 parallel.dp=2 \
    parallel.tp=2 --hardware "$WORK/hw.yaml" --gpus 4
  link=$(grep -A3 'name: network' "$WORK/hw.yaml" | grep -E 'bandwidth|latency' | tr -s ' \n' ' ')
  echo "  the link:$link"
else
  fail "bench across the nodes failed"; tail -5 "$WORK/bench.log" >&2
fi

# the devices are measured by as many ranks as this machine has cores, whatever node (host name)
# they are on: the two nodes share its cores
cores=$(getconf _NPROCESSORS_ONLN)
want=$((cores < 4 ? cores : 4))
out=$("${MPI_NODES[@]}" $("$NODES" mpirun-args) "$LOOM" bench --only vector --quick \
  --out "$WORK/dev.yaml" 2>&1)
check "bench across the nodes: $want of the 4 ranks measure the devices ($cores cores): $(grep 'devices measured' <<<"$out")" \
  grep -q "devices measured on $want ranks at once" <<<"$out"

echo "without TCP (shared memory and self only) the nodes cannot reach each other"
no_tcp=$("$NODES" mpirun-args | sed 's/btl tcp,self,vader/btl self,vader/')
"${MPI_NODES[@]}" $no_tcp "$LOOM" train "${GPT2[@]}" training.micro_batch_size=2 \
  parallel.dp=4 training.steps=1 run.name=no_tcp run.output_dir="$WORK/runs" --quiet \
  >"$WORK/no_tcp.log" 2>&1
rc=$?
check "vader and self only: the job fails (rc $rc)" test $rc != 0
check "vader and self only: Open MPI says the nodes cannot reach each other" \
  grep -q "unable to reach each other" "$WORK/no_tcp.log"
finish
