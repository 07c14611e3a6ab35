#!/usr/bin/env bash
# Several "nodes" on this one machine, for multi-node runs and tests of loom without a cluster.
#
#   scripts/nodes.sh up N [SLOTS]  make nodes loom-node0 .. loom-node(N-1) (idempotent), with
#                                  SLOTS ranks each in their hostfile (default 2)
#   scripts/nodes.sh down          remove the nodes, their bridge and namespace files
#   scripts/nodes.sh exec NODE CMD...   run CMD inside NODE (its network and its hostname)
#   scripts/nodes.sh hostfile      print the Open MPI hostfile of the nodes
#   scripts/nodes.sh mpirun-args   print the mpirun options of a run across the nodes
#   scripts/nodes.sh env           the same as OMPI_MCA_* variables, hostfile included, for
#                                  `env $(scripts/nodes.sh env) loom train --nproc 4 ...`
#   scripts/nodes.sh list          the nodes that are up, with their addresses and links
#   scripts/nodes.sh link NODE up|down   connect or cut a node (its veth on the bridge)
#   scripts/nodes.sh remove NODE   the node fails for good, as on a power loss: its processes
#                                  stopped (killed by 'down'), its link and namespaces removed;
#                                  the hostfile still names it (as a job's allocation would)
#   scripts/nodes.sh shape NODE [rate R] [delay D] [loss P] | off
#                                  shape a node's link both ways: tc tbf at rate R (1gbit,
#                                  500mbit), delay D (2ms) and loss P (1%) by tc netem, or where
#                                  the kernel lacks sch_netem by iptables and loom-netdelay;
#                                  off removes it
#
# LOOM_NODES=SET (default "loom": a letter, then up to 8 letters or digits) names a set of
# nodes, so that sets can coexist (the tests make their own): nodes SET-node0.., the bridge
# SET-br, veths SET-veth0.., the hostfile /run/loom-nodes/SET.hosts. The set "loom" uses the
# network 10.233.0.0/24; another set takes the first free 10.233.X.0/24 (X = 1..250) when it
# comes up; LOOM_NODES_NET=10.233.7 chooses.
#
# A node is two namespaces of this kernel, kept by bind mounts so that they outlive the
# commands run in them:
# - a network namespace (`ip netns add loom-nodeI`, /run/netns/loom-nodeI) with its loopback
#   up and an interface `eth0` (10.233.0.(I+1)/24), one end of a veth pair whose other end,
#   `loom-vethI` in the root namespace, is a port of the bridge `loom-br` (10.233.0.254/24).
#   The range exists only on the bridge and in the nodes; nodes reach each other through the
#   bridge, and `ip link set loom-vethI down` (`nodes.sh link loom-nodeI down`) cuts node I
#   off (the fault tests).
# - a UTS namespace with the hostname loom-nodeI (/run/loom-nodes/loom-nodeI.uts, made by
#   `unshare --uts=FILE` on a private bind mount). A persistent UTS namespace is what lets every
#   process of a node, started at any time, share its hostname: Open MPI and loom see the node's
#   name in gethostname(), which is how a multi-node job tells its nodes apart. (The other way,
#   `ip netns exec` + `unshare --uts sh -c 'hostname ...; exec ...'` for each command, gives a
#   fresh namespace to every command and works too; one file per node is simpler to enter.)
#
# `exec` enters both with nsenter (scripts/node_agent.sh does the same for mpirun, in place of
# ssh). Shared memory, files and processes stay common to all nodes: a node is a network and a
# name, which is what the tests need (Open MPI's shared memory transport is only used between
# ranks of one host name).
#
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2, util-linux (unshare, nsenter).
set -euo pipefail

SET=${LOOM_NODES:-loom}
[[ "$SET" =~ ^[a-z][a-z0-9]{0,8}$ ]] ||
  { echo "nodes.sh: LOOM_NODES is a letter and up to 8 letters or digits, not '$SET'" >&2; exit 1; }
PREFIX=$SET-node
BRIDGE=$SET-br
VETH=$SET-veth
UTS_DIR=/run/loom-nodes
HOSTFILE=$UTS_DIR/$SET.hosts
NETFILE=$UTS_DIR/$SET.net # the set's network, written by 'up'

die() { echo "nodes.sh: $*" >&2; exit 1; }

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (network and UTS namespaces); run it as root or with sudo"
  command -v ip >/dev/null || die "needs iproute2 (ip); install iproute2"
  command -v nsenter >/dev/null && command -v unshare >/dev/null ||
    die "needs util-linux (nsenter, unshare); install util-linux"
}

node_ns() { echo "$PREFIX$1"; }

nodes_up() { # the indices of the set's nodes that exist, in order
  ip netns list 2>/dev/null | awk '{print $1}' | sed -n "s/^$PREFIX\([0-9][0-9]*\)$/\1/p" | sort -n
}

net_of_set() { # the set's 10.233.X (after 'up')
  [ -s "$NETFILE" ] || die "the nodes of set '$SET' are not up ('nodes.sh up N' first)"
  cat "$NETFILE"
}

# A free 10.233.X for a new set: none of this machine's addresses in it (under the lock).
pick_net() {
  if [ -n "${LOOM_NODES_NET:-}" ]; then echo "$LOOM_NODES_NET"; return; fi
  if [ "$SET" = loom ]; then echo 10.233.0; return; fi
  local used; used=$(ip -4 -o addr show | awk '{print $4}')
  for x in $(seq 1 250); do
    grep -q "^10\.233\.$x\." <<<"$used" || { echo "10.233.$x"; return; }
  done
  die "no free network 10.233.X.0/24 left for set '$SET'"
}

# The UTS directory is a private bind mount: a namespace file can be bind-mounted only where
# mounts do not propagate (/run itself may be shared).
uts_dir_ready() {
  mkdir -p "$UTS_DIR"
  if ! grep -q " $UTS_DIR " /proc/self/mountinfo; then
    mount --bind "$UTS_DIR" "$UTS_DIR"
    mount --make-private "$UTS_DIR"
  fi
}

up_bridge() {
  local net=$1
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  ip addr replace "$net.254/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
}

up_node() {
  local i=$1 net=$2 ns; ns=$(node_ns "$i")
  ip netns list | awk '{print $1}' | grep -qx "$ns" || ip netns add "$ns"
  ip -n "$ns" link set lo up
  if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
    ip link del "$VETH$i" 2>/dev/null || true
    ip link add "$VETH$i" type veth peer name "$SET-tmp$i"
    ip link set "$SET-tmp$i" netns "$ns"
    ip -n "$ns" link set "$SET-tmp$i" name eth0
  fi
  ip link set "$VETH$i" master "$BRIDGE"
  ip link set "$VETH$i" up
  ip -n "$ns" addr replace "$net.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  local uts=$UTS_DIR/$ns.uts
  if ! grep -q " $uts " /proc/self/mountinfo; then
    touch "$uts"
    unshare --uts="$uts" hostname "$ns"
  fi
}

down_node() {
  local i=$1 ns; ns=$(node_ns "$i")
  unshape_netfilter "$ns"
  rm -f "$UTS_DIR/$ns.delay.log"
  ip link del "$VETH$i" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  local uts=$UTS_DIR/$ns.uts
  if grep -q " $uts " /proc/self/mountinfo; then umount "$uts"; fi
  rm -f "$uts"
}

# every node's link is up at both ends (a new veth takes a moment to report carrier)
wait_links() {
  local n=$1
  for ((i = 0; i < n; i++)); do
    local ok=0
    for _ in $(seq 20); do
      if [ "$(cat "/sys/class/net/$VETH$i/operstate" 2>/dev/null)" = up ] &&
         ip -n "$(node_ns "$i")" -br link show eth0 | grep -qw UP; then
        ok=1; break
      fi
      sleep 0.2
    done
    [ $ok = 1 ] || die "the link of node $i ($VETH$i <-> eth0 in $(node_ns "$i")) is not up"
  done
}

cmd_up() {
  local n=${1:-} slots=${2:-2}
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 250 ] ||
    die "up needs the number of nodes (1..250), e.g. 'nodes.sh up 2'"
  [[ "$slots" =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] ||
    die "the slots of a node (ranks it runs) are a whole number >= 1, not '$slots'"
  need_root
  uts_dir_ready
  local net
  exec 9>"$UTS_DIR/.lock" # sets coming up together pick different networks
  flock 9
  if [ -s "$NETFILE" ]; then net=$(cat "$NETFILE"); else net=$(pick_net); fi
  [[ "$net" =~ ^10\.233\.[0-9]+$ ]] || [[ "$net" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
    die "LOOM_NODES_NET is the first three numbers of a /24 network (10.233.7), not '$net'"
  up_bridge "$net"
  echo "$net" >"$NETFILE"
  flock -u 9
  for ((i = 0; i < n; i++)); do up_node "$i" "$net"; done
  for i in $(nodes_up); do [ "$i" -lt "$n" ] || down_node "$i"; done # fewer than before
  wait_links "$n"
  for ((i = 0; i < n; i++)); do echo "$(node_ns "$i") slots=$slots"; done >"$HOSTFILE"
  cmd_list
}

cmd_down() {
  need_root
  for i in $(nodes_up); do down_node "$i"; done
  for f in "$UTS_DIR/$PREFIX"*.uts; do # namespace files left by an interrupted 'up'
    [ -e "$f" ] || continue
    if grep -q " $f " /proc/self/mountinfo; then umount "$f"; fi
    rm -f "$f"
  done
  for f in "$UTS_DIR/$PREFIX"*.gone; do # the stopped processes of removed nodes
    [ -e "$f" ] || continue
    local p
    for p in $(cat "$f"); do kill -KILL "$p" 2>/dev/null || true; done
    rm -f "$f"
  done
  rm -f "$HOSTFILE" "$NETFILE"
  ip link del "$BRIDGE" 2>/dev/null || true
  # the directory goes with the last set
  if [ -d "$UTS_DIR" ] && [ -z "$(ls "$UTS_DIR")" ]; then
    if grep -q " $UTS_DIR " /proc/self/mountinfo; then umount "$UTS_DIR"; fi
    rm -f "$UTS_DIR/.lock"
    rmdir "$UTS_DIR" 2>/dev/null || true
  fi
}

# NODE: SET-nodeI or I
node_index() {
  local a=${1#"$PREFIX"}
  [[ "$a" =~ ^[0-9]+$ ]] ||
    die "no node '$1' in set '$SET' (its nodes are ${PREFIX}0, ${PREFIX}1, ...)"
  echo "$a"
}

cmd_exec() {
  [ $# -ge 2 ] || die "exec needs a node and a command, e.g. 'nodes.sh exec ${PREFIX}0 hostname'"
  need_root
  local i ns; i=$(node_index "$1"); ns=$(node_ns "$i"); shift
  [ -e "/run/netns/$ns" ] || die "node $ns is not up ('nodes.sh up N' first)"
  exec nsenter --net="/run/netns/$ns" --uts="$UTS_DIR/$ns.uts" -- "$@"
}

cmd_link() {
  [ $# = 2 ] && { [ "$2" = up ] || [ "$2" = down ]; } ||
    die "link needs a node and up or down, e.g. 'nodes.sh link ${PREFIX}1 down'"
  need_root
  local i; i=$(node_index "$1")
  ip link set "$VETH$i" "$2"
}

# A node that fails for good, as a machine that loses power: its processes stop where they are
# (SIGSTOP: no FIN or RST leaves the node, nothing of it answers again), its link goes, then
# its namespaces. The stopped processes are killed by 'down' (their pids in SET-nodeI.gone);
# until then the kernel keeps the namespaces they hold, unreachable.
cmd_remove() {
  [ $# = 1 ] || die "remove needs a node, e.g. 'nodes.sh remove ${PREFIX}1'"
  need_root
  local i ns; i=$(node_index "$1"); ns=$(node_ns "$i")
  [ -e "/run/netns/$ns" ] || die "node $ns is not up"
  local pids; pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [ -z "$pids" ] || kill -STOP $pids 2>/dev/null || true
  echo $pids >>"$UTS_DIR/$ns.gone"
  down_node "$i"
}

# Shaping node I's link both ways. Rate: tc tbf on both ends of the link (the veth in the root
# namespace for traffic to the node, eth0 in the node for traffic from it). Delay and loss: tc
# netem there (tbf as its child) where the kernel has sch_netem; where it has not, netfilter in
# the node's namespace does the same to eth0's packets in both directions: the iptables
# `statistic` match drops each with probability P, and the NFQUEUE target hands the rest to
# loom-netdelay (tools/netdelay), which lets them on D later in their order. Each direction
# gets D and P, as netem on both ends would give.
DELAY_QUEUE=0 # the NFQUEUE queue of a node's delay (one per network namespace)

netem_available() { # tries netem on a scratch namespace's loopback
  local probe=$SET-netem-probe ok=1
  ip netns add "$probe" 2>/dev/null || return 1
  ip netns exec "$probe" tc qdisc add dev lo root netem delay 1ms 2>/dev/null || ok=0
  ip netns del "$probe" 2>/dev/null || true
  [ $ok = 1 ]
}

netdelay_bin() {
  local here; here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  local bin=${LOOM_NETDELAY:-$here/../build/loom-netdelay}
  [ -x "$bin" ] || die "delay without tc netem needs loom-netdelay ('make build' makes $bin; or set LOOM_NETDELAY)"
  echo "$bin"
}

# the node's netfilter shaping and its delay process, gone
unshape_netfilter() {
  local ns=$1 pidfile=$UTS_DIR/$1.delay.pid
  if [ -e "/run/netns/$ns" ] && command -v iptables >/dev/null; then
    ip netns exec "$ns" iptables -t mangle -F OUTPUT 2>/dev/null || true
    ip netns exec "$ns" iptables -t mangle -F PREROUTING 2>/dev/null || true
  fi
  if [ -s "$pidfile" ]; then
    local pid; pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$pidfile" "$pidfile.tmp"
}

# percent ("1%", "0.5") -> probability for iptables' statistic match
loss_probability() {
  local p=${1%\%}
  [[ "$p" =~ ^[0-9]+([.][0-9]+)?$ ]] && awk -v p="$p" 'BEGIN { if (!(p > 0 && p < 100)) exit 1; print p / 100 }' ||
    die "shape: loss '$1' is not a percentage above 0 and below 100 (e.g. 1%)"
}

shape_netfilter() { # NS DELAY LOSS
  local ns=$1 delay=$2 loss=$3 ipt=(ip netns exec "$1" iptables -t mangle)
  command -v iptables >/dev/null || die "delay and loss without tc netem need iptables"
  if [ -n "$loss" ]; then
    local p; p=$(loss_probability "$loss")
    "${ipt[@]}" -A OUTPUT -o eth0 -m statistic --mode random --probability "$p" -j DROP ||
      die "iptables refused the loss rule (the kernel's statistic match?)"
    "${ipt[@]}" -A PREROUTING -i eth0 -m statistic --mode random --probability "$p" -j DROP
  fi
  if [ -n "$delay" ]; then
    local bin pidfile=$UTS_DIR/$ns.delay.pid log=$UTS_DIR/$ns.delay.log
    bin=$(netdelay_bin)
    rm -f "$pidfile"
    ip netns exec "$ns" setsid "$bin" --queue $DELAY_QUEUE --delay "$delay" --pidfile "$pidfile" \
      </dev/null >"$log" 2>&1 &
    for _ in $(seq 50); do [ -s "$pidfile" ] && break; kill -0 $! 2>/dev/null || break; sleep 0.1; done
    [ -s "$pidfile" ] || { unshape_netfilter "$ns"; die "loom-netdelay did not start: $(cat "$log")"; }
    # --queue-bypass: should the delay process end, packets pass undelayed instead of dropping
    "${ipt[@]}" -A OUTPUT -o eth0 -j NFQUEUE --queue-num $DELAY_QUEUE --queue-bypass &&
      "${ipt[@]}" -A PREROUTING -i eth0 -j NFQUEUE --queue-num $DELAY_QUEUE --queue-bypass ||
      { unshape_netfilter "$ns"; die "iptables refused the NFQUEUE rule (the kernel's nfnetlink_queue?)"; }
  fi
  echo "$ns: ${delay:+delay $delay }${loss:+loss $loss }each way by iptables${delay:+ and loom-netdelay} (this kernel has no sch_netem)"
}

cmd_shape() {
  [ $# -ge 2 ] || die "shape needs a node and 'rate R', 'delay D', 'loss P' or 'off'"
  need_root
  command -v tc >/dev/null || die "needs tc (iproute2)"
  local i ns; i=$(node_index "$1"); ns=$(node_ns "$i"); shift
  [ -e "/run/netns/$ns" ] || die "node $ns is not up"
  local rate='' delay='' loss=''
  while [ $# -gt 0 ]; do
    case $1 in
      off) tc qdisc del dev "$VETH$i" root 2>/dev/null || true
           ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
           unshape_netfilter "$ns"
           return ;;
      rate|delay|loss) [ $# -ge 2 ] || die "shape: '$1' needs a value"
           printf -v "$1" '%s' "$2"; shift 2 ;;
      *) die "shape: '$1' is not rate, delay, loss or off" ;;
    esac
  done
  [ -z "$loss" ] || loss_probability "$loss" >/dev/null # a bad value before any change
  local netem=0
  [ -z "$delay$loss" ] || ! netem_available || netem=1
  unshape_netfilter "$ns"
  local where
  for where in root "$ns"; do
    local dev=eth0 run=(ip netns exec "$ns" tc)
    [ "$where" = root ] && dev=$VETH$i run=(tc)
    "${run[@]}" qdisc del dev "$dev" root 2>/dev/null || true
    local parent=root
    if [ $netem = 1 ]; then
      "${run[@]}" qdisc add dev "$dev" root handle 1: netem ${delay:+delay $delay} \
        ${loss:+loss $loss} || die "tc netem refused 'delay $delay loss $loss' on $dev"
      parent="parent 1:1"
    fi
    if [ -n "$rate" ]; then
      # bursts of up to 256 KB, packets queued up to 50 ms
      "${run[@]}" qdisc add dev "$dev" $parent handle 10: tbf rate "$rate" burst 256kb \
        latency 50ms || die "tc tbf refused rate '$rate' on $dev"
    fi
  done
  if [ $netem = 0 ] && [ -n "$delay$loss" ]; then shape_netfilter "$ns" "$delay" "$loss"; fi
}

cmd_hostfile() {
  [ -s "$HOSTFILE" ] || die "the nodes of set '$SET' are not up ('nodes.sh up N' first)"
  cat "$HOSTFILE"
}

# What mpirun needs to start ranks inside the nodes, as MCA parameters:
# - the agent instead of ssh, called by mpirun for every node (no tree spawn: a daemon does not
#   launch the next one);
# - TCP between nodes, shared memory (vader) inside one (Open MPI uses vader only between ranks
#   of one host name), over the nodes' network only (btl and oob if_include: the addresses
#   ranks and daemons advertise and connect to; Open MPI 4.1 still binds its listening sockets
#   to the wildcard address: inside a node that is its eth0 and loopback only);
# - TCP keepalive on the daemons' connections (5 s idle, then 3 probes 2 s apart), so that
#   mpirun notices a node it lost in about 11 s and ends the job, instead of after Open MPI's
#   default 8 minutes;
# - when the nodes' slots together exceed this machine's CPUs, a rank waiting in MPI yields its
#   CPU (mpi_yield_when_idle), as Open MPI does by itself for ranks oversubscribing one host.
#   Each node's daemon counts only its own slots, so it would busy-poll, and a waiting rank
#   would take half a core from a rank that computes beside it: on 2 cores, dp2 x tp2 across
#   two nodes of 2 slots ran 7-22% slower a step than with the yield (2026-11-30). With it, a
#   run across the nodes differs from the same run on one node by the network alone.
mca_params() {
  local here net slots; here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd); net=$(net_of_set)
  slots=$(sed -n 's/.* slots=\([0-9]*\).*/\1/p' "$HOSTFILE" 2>/dev/null | awk '{s += $1} END {print s + 0}')
  printf '%s %s\n' plm_rsh_agent "$here/node_agent.sh" plm_rsh_no_tree_spawn 1 \
    btl tcp,self,vader btl_tcp_if_include "$net.0/24" \
    oob_tcp_if_include "$net.0/24" oob_tcp_keepalive_time 5 oob_tcp_keepalive_intvl 2 \
    oob_tcp_keepalive_probes 3
  if [ "$slots" -gt "$(nproc)" ]; then printf '%s %s\n' mpi_yield_when_idle 1; fi
}

cmd_mpirun_args() {
  local params; params=$(mca_params)
  while read -r k v; do printf -- '--mca %s %s ' "$k" "$v"; done <<<"$params"
  echo
}

cmd_env() {
  local params; params=$(mca_params)
  while read -r k v; do echo "OMPI_MCA_$k=$v"; done <<<"$params"
  echo "OMPI_MCA_orte_default_hostfile=$(cmd_hostfile >/dev/null && echo "$HOSTFILE")"
}

cmd_list() {
  local net=?
  [ -s "$NETFILE" ] && net=$(cat "$NETFILE")
  for i in $(nodes_up); do
    local state; state=$(cat "/sys/class/net/$VETH$i/operstate" 2>/dev/null || echo missing)
    echo "$(node_ns "$i") $net.$((i + 1)) link $VETH$i $state"
  done
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  exec) shift; cmd_exec "$@" ;;
  link) shift; cmd_link "$@" ;;
  remove) shift; cmd_remove "$@" ;;
  shape) shift; cmd_shape "$@" ;;
  hostfile) cmd_hostfile ;;
  mpirun-args) cmd_mpirun_args ;;
  env) cmd_env ;;
  list) cmd_list ;;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
