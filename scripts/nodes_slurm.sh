#!/usr/bin/env bash
# A Slurm cluster over the nodes of scripts/nodes.sh: one slurmctld (on node 0, as on a head
# node that also computes) and one slurmd per node, each inside its node's network and UTS
# namespaces, authenticated by one munged; everything (slurm.conf, munge key and socket, state,
# spool and temporary directories, pid files, logs) in DIR.
#
#   scripts/nodes_slurm.sh up DIR [CPUS]   configure and start (the nodes must be up; CPUS per
#                                          node, default 2); waits until every node is idle
#   scripts/nodes_slurm.sh env DIR         the environment of a client and of srun-launched
#                                          ranks: SLURM_CONF, Open MPI's TCP between the nodes
#                                          (`env $(scripts/nodes_slurm.sh env DIR) sbatch ...`)
#   scripts/nodes_slurm.sh down DIR        stop the daemons (each by its pid file, bounded wait)
#
# The set of nodes is LOOM_NODES's (scripts/nodes.sh), so sets with clusters of their own can
# coexist: their daemons listen inside their own namespaces. Clients (sbatch, squeue, srun) work
# from the root namespace (over the bridge) or from any node.
#
# What makes one machine hold several slurmds (found by trying, Slurm 22.05):
# - each slurmd runs in its node's namespaces and is named with -N; slurm.conf gives each node
#   its address (NodeAddr) and the controller its node's (SlurmctldHost=NODE(ADDR)), so the
#   ports are the default ones in every node;
# - per-node paths through Slurm's %n (the node name): SlurmdSpoolDir, SlurmdPidFile,
#   SlurmdLogFile, and TmpFS, which mpi/pmix uses for its client directory
#   (TMPFS/spmix_appdir_<uid>_<job>.<step>): with a /tmp common to every node, the second
#   node's stepd otherwise finds the first one's directory and the step fails ("Cannot create
#   directory ... File exists"); the directories are made here (slurmd does not make them);
# - proctrack/pgid and task/none (no cgroups needed); auth/munge (Debian's slurm-wlm 22.05 also
#   ships auth/none, but munge is what a cluster runs and works here).
# Needs root (slurmd starts steps as the submitting user), slurm-wlm and munge.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NODES=$HERE/nodes.sh
SET=${LOOM_NODES:-loom}
die() { echo "nodes_slurm.sh: $*" >&2; exit 1; }

cmd_up() {
  local dir=${1:-} cpus=${2:-2}
  [ -n "$dir" ] || die "up needs a directory for the cluster's files"
  [ "$(id -u)" = 0 ] || die "needs root (slurmd starts job steps as the submitting user)"
  local c
  for c in munged munge slurmctld slurmd sinfo; do
    command -v $c >/dev/null || die "$c not found: install slurm-wlm and munge"
  done
  local net nodes=()
  net=$(cat "/run/loom-nodes/$SET.net" 2>/dev/null) || die "the nodes of set '$SET' are not up"
  mapfile -t nodes < <("$NODES" list | awk '{print $1}')
  [ ${#nodes[@]} -ge 1 ] || die "the nodes of set '$SET' are not up"
  mkdir -p "$dir/munge" "$dir/state" && chmod 700 "$dir/munge"
  dir=$(cd "$dir" && pwd)
  local n
  for n in "${nodes[@]}"; do mkdir -p "$dir/spool/$n" "$dir/tmp/$n"; done
  [ -s "$dir/munge/munge.key" ] || {
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 2>/dev/null
    chmod 400 "$dir/munge/munge.key"
  }
  # --force: munged refuses a socket under a directory others may write (/tmp) otherwise
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/seed" || die "munged does not start (see $dir/munge/munged.log)"
  {
    echo "ClusterName=$SET"
    echo "SlurmctldHost=${nodes[0]}($net.1)"
    cat <<CONF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
PlugStackConfig=$dir/plugstack.conf
CONF
    for n in "${nodes[@]}"; do
      echo "NodeName=$n NodeAddr=$net.$((${n##*-node} + 1)) CPUs=$cpus State=UNKNOWN"
    done
    echo "PartitionName=$SET Nodes=$(IFS=,; echo "${nodes[*]}") Default=YES MaxTime=INFINITE" \
      "State=UP OverSubscribe=FORCE:4"
  } >"$dir/slurm.conf"
  : >"$dir/plugstack.conf"
  export SLURM_CONF=$dir/slurm.conf
  "$NODES" exec "${nodes[0]}" slurmctld -f "$SLURM_CONF" -i ||
    die "slurmctld does not start (see $dir/slurmctld.log)"
  for n in "${nodes[@]}"; do
    "$NODES" exec "$n" slurmd -f "$SLURM_CONF" -N "$n" ||
      die "slurmd on $n does not start (see $dir/slurmd-$n.log)"
  done
  local k idle=0
  for k in $(seq 150); do # up to 30 s for every node to register as idle
    idle=$(sinfo -h -o '%t %D' 2>/dev/null | awk '$1 == "idle" {print $2}')
    [ "${idle:-0}" = ${#nodes[@]} ] && break
    sleep 0.2
  done
  [ "${idle:-0}" = ${#nodes[@]} ] ||
    die "not every node is idle after 30 s: $(sinfo -h -N -o '%N %t' | paste -sd' ')"
  sinfo -N -o '%N %t %c'
}

cmd_env() {
  local dir=${1:?env needs the directory of the cluster}
  dir=$(cd "$dir" && pwd)
  local net; net=$(cat "/run/loom-nodes/$SET.net") || die "the nodes of set '$SET' are not up"
  echo "SLURM_CONF=$dir/slurm.conf"
  echo "OMPI_MCA_btl=tcp,self,vader"
  echo "OMPI_MCA_btl_tcp_if_include=$net.0/24"
  echo "OMPI_MCA_oob_tcp_if_include=$net.0/24"
}

cmd_down() {
  local dir=${1:?down needs the directory of the cluster} f pid k
  for f in "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || continue
    for k in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  env) shift; cmd_env "$@" ;;
  down) shift; cmd_down "$@" ;;
  *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
