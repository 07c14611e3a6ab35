#!/usr/bin/env bash
# mpirun's launch agent for the nodes of scripts/nodes.sh, in place of ssh:
#   mpirun $(scripts/nodes.sh mpirun-args) --hostfile /run/loom-nodes/loom.hosts ...
# Open MPI calls it as it would call ssh: `node_agent.sh [ssh options] HOST COMMAND...`, where
# COMMAND is one shell command line split into words (ssh joins them with spaces and hands the
# line to the remote shell; so does this). It enters HOST's network and UTS namespaces and runs
# the line there with sh, so Open MPI's daemon (orted) and the ranks it starts live inside the
# node: its address, its hostname.
#
# HOST is a node's name (loom-node1, or SET-nodeI for a set LOOM_NODES=SET): its network
# namespace and UTS namespace file have that name.
set -euo pipefail

# ssh-style options Open MPI may put before the host (-x: no X11, -o/-p with a value)
while [ $# -gt 0 ]; do
  case $1 in
    -o | -p | -l | -i | -F) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { echo "node_agent.sh: usage: node_agent.sh HOST COMMAND..." >&2; exit 2; }
ns=$1; shift
if ! [[ "$ns" =~ ^[a-z][a-z0-9]*-node[0-9]+$ ]]; then
  echo "node_agent.sh: '$ns' is not a node of scripts/nodes.sh (loom-node0, ...)" >&2
  exit 255
fi
if [ ! -e "/run/netns/$ns" ] || [ ! -e "/run/loom-nodes/$ns.uts" ]; then
  echo "node_agent.sh: node $ns is not up (run 'scripts/nodes.sh up N')" >&2
  exit 255
fi
# The daemon stays attached to the agent (as under ssh without --daemonize): when it fails,
# mpirun sees the agent's status instead of waiting for a daemon that is gone.
words=()
for w in "$@"; do [ "$w" = --daemonize ] || words+=("$w"); done
line=${words[*]}

# Like ssh, the agent reaches the node over the network: it waits (up to LOOM_NODE_WAIT_S, 120 s)
# until the node can open a TCP connection to mpirun (the address in the command's
# orte_hnp_uri), so that a job relaunched while a link is down starts once it is back, instead
# of its daemon giving up at once and leaving mpirun waiting for it.
hnp=$(grep -oE 'tcp://[0-9.,]+:[0-9]+' <<<"$line" | head -1 || true)
if [ -n "$hnp" ]; then
  port=${hnp##*:} addrs=${hnp#tcp://}; addrs=${addrs%:*}
  wait_s=${LOOM_NODE_WAIT_S:-120} start=$SECONDS said=0
  until nsenter --net="/run/netns/$ns" -- timeout 3 bash -c \
      'for a in ${0//,/ }; do (exec 3<>"/dev/tcp/$a/$1") 2>/dev/null && exit 0; done; exit 1' \
      "$addrs" "$port"; do
    if [ $((SECONDS - start)) -ge "$wait_s" ]; then
      echo "node_agent.sh: node $ns cannot reach mpirun at $addrs port $port after $wait_s s" >&2
      exit 255
    fi
    [ $said = 1 ] || echo "node_agent.sh: node $ns cannot reach mpirun at $addrs port $port;" \
      "waiting up to $wait_s s for its network" >&2
    said=1
    sleep 1
  done
fi
exec nsenter --net="/run/netns/$ns" --uts="/run/loom-nodes/$ns.uts" -- sh -c "$line"
