# Shared by the multi-node tests: two "nodes" of scripts/nodes.sh (network and UTS namespaces
# joined by a bridge) brought up for the test and always taken down after it (also when the test
# fails or is interrupted), and runs of `loom train` whose ranks start inside the nodes. Each
# test has a set of nodes of its own (LOOM_NODES=t<pid>: nodes $N0 and $N1, on a network of
# their own), so that tests of several checkouts can run at once.
# Needs root: elsewhere, or where namespaces cannot be made, the test prints "skipped: ..." and
# exits 77 (CTest's SKIP_RETURN_CODE).
. "$(dirname "${BASH_SOURCE[0]}")/../train/parallel_common.sh"
NODES=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts" && pwd)/nodes.sh
# a link's delay without tc netem (nodes.sh shape): the one built beside this loom
export LOOM_NETDELAY=${LOOM_NETDELAY:-$(dirname "$LOOM")/loom-netdelay}
export LOOM_NODES=t$$
N0=$LOOM_NODES-node0 N1=$LOOM_NODES-node1
HOSTFILE=/run/loom-nodes/$LOOM_NODES.hosts

skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (the nodes are network namespaces)"
for tool in ip nsenter unshare ss; do
  command -v $tool >/dev/null || skip "needs $tool (iproute2, util-linux)"
done
# can this machine make a network namespace at all? (a container without CAP_SYS_ADMIN cannot)
probe=loom-probe$$
if ! ip netns add $probe 2>/dev/null; then skip "cannot create network namespaces here"; fi
ip netns del $probe
trap '"$NODES" down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
if ! "$NODES" up 2 2 >"$WORK/nodes.log" 2>&1; then
  echo "FAIL: nodes.sh up 2:"; cat "$WORK/nodes.log"; exit 1
fi
NET=$(cat /run/loom-nodes/$LOOM_NODES.net) # 10.233.X: node I is $NET.(I+1)

# mpirun on node 0 (the head node), 4 ranks over the two nodes' hostfile (2 slots each)
MPI_NODES=("$NODES" exec "$N0" timeout 300 mpirun --bind-to none -np 4 --hostfile "$HOSTFILE")

# train_nodes NAME overrides... : one run across the nodes, output in $WORK/runs
train_nodes() {
  local name=$1; shift
  "${MPI_NODES[@]}" $("$NODES" mpirun-args) "$LOOM" train "$@" run.name="$name" \
    run.output_dir="$WORK/runs" --quiet >"$WORK/$name.log" 2>&1 ||
    { fail "$name: training across the nodes failed"; tail -5 "$WORK/$name.log" >&2; return 1; }
}

# wait_for WHAT SECONDS COMMAND...: poll until COMMAND succeeds (fails the check after SECONDS)
wait_for() {
  local what=$1 secs=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@"; do
    [ $SECONDS -lt $end ] || { fail "$what: not within $secs s"; return 1; }
    sleep 0.2
  done
}
# at_step NAME STEP: run NAME has logged STEP
at_step() { grep -q "\"step\": $2," "$(run_dir "$1" 2>/dev/null)/metrics.jsonl" 2>/dev/null; }
