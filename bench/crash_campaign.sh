#!/usr/bin/env bash
# The long kill -9 campaign: tests/train/parallel_crash_test.sh with more trials and several seeds.
#   bench/crash_campaign.sh build/loom [TRIALS=60] [SEEDS="1 2 3"]
set -u
LOOM=${1:?usage: $0 path/to/loom [trials] [seeds]}
TRIALS=${2:-60}
SEEDS=${3:-"1 2 3"}
rc=0
for s in $SEEDS; do
  echo "seed $s, $TRIALS trials"
  LOOM_CRASH_SEED=$s LOOM_CRASH_TRIALS=$TRIALS bash "$(dirname "$0")/../tests/train/parallel_crash_test.sh" "$LOOM" || rc=1
done
exit $rc
