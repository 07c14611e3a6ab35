#!/usr/bin/env bash
# mpirun's launch agent for the nodes of scripts/nodes.sh, in place of ssh:
#   mpirun --mca plm_rsh_agent scripts/node_agent.sh --hostfile <(scripts/nodes.sh hostfile) ...
# Open MPI calls it as it would call ssh: `node_agent.sh [ssh options] HOST COMMAND...`, where
# COMMAND is one shell command line split into words (ssh joins them with spaces and hands the
# line to the remote shell; so does this). It enters HOST's network and UTS namespaces and runs
# the line there with sh, so Open MPI's daemon (orted) and the ranks it starts live inside the
# node: its address, its hostname.
#
# HOST is a node's name (loom-node1), its index or its address (10.233.0.2).
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
host=$1; shift

case $host in
  loom-node*) ns=$host ;;
  10.233.0.*) ns=loom-node$((${host#10.233.0.} - 1)) ;;
  [0-9]*) ns=loom-node$host ;;
  *) echo "node_agent.sh: '$host' is not a node of scripts/nodes.sh (loom-node0, ...)" >&2
     exit 255 ;;
esac
if [ ! -e "/run/netns/$ns" ] || [ ! -e "/run/loom-nodes/$ns.uts" ]; then
  echo "node_agent.sh: node $ns is not up (run 'scripts/nodes.sh up N')" >&2
  exit 255
fi
exec nsenter --net="/run/netns/$ns" --uts="/run/loom-nodes/$ns.uts" -- sh -c "$*"
