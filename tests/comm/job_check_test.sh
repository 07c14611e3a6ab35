#!/usr/bin/env bash
# loom's check of the job at mesh start (loom_mesh_check_job, src/comm/mesh.c): ranks that share
# one MPI world but not one launch, config or count are refused before any work, with one error
# naming the rank that disagrees. Open MPI keeps two mpirun jobs apart by itself (each has its
# own job id and world); what it does not check is what loom checks here:
# - an MPMD launch (`mpirun A : B`) whose parts were given different configs: refused, naming
#   rank 2 and both config hashes;
# - parts with different LOOM_LAUNCH_ID (`-x LOOM_LAUNCH_ID=a ... : -x LOOM_LAUNCH_ID=b ...`):
#   refused as another launch, naming rank 2;
# - a rank whose launcher says it started more ranks than MPI joined (OMPI_COMM_WORLD_SIZE=2
#   on a lone process: what srun without a usable PMI plugin would make, one-rank jobs each
#   believing it is rank 0): refused;
# - the same job launched normally passes, and nothing is written for the refused ones (no run
#   directory).
# Runs anywhere mpirun runs (no root, no namespaces); multinode_stray_test.sh does the same
# across two nodes, with a stray job beside a running one.
. "$(dirname "$0")/../train/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }
G=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64
  model.intermediate=128 training.seq_len=32 training.steps=2 training.micro_batch_size=1
  training.grad_accum=1 data.train_shards="$WORK/train.bin" checkpoint.every=0
  data.val_fraction=0 parallel.dp=4 run.output_dir="$WORK/runs" --quiet)
MPI=(timeout 120 "${MPIRUN[@]}")

run_cmd "${MPI[@]}" -np 4 "$LOOM" train "${G[@]}" run.name=ok
expect_rc "one launch, one config: trains" 0

run_cmd "${MPI[@]}" -np 2 "$LOOM" train "${G[@]}" run.name=mpmd : \
  -np 2 "$LOOM" train "${G[@]}" run.name=mpmd run.seed=7
check "MPMD with two configs: refused" test "$RUN_RC" != 0
expect_err "MPMD with two configs: names rank 2 and the configs" \
  "loom train: error: rank 2 on $(hostname) was given another config (hash"
check "MPMD with two configs: one error line" test "$(grep -c 'another config' "$RUN_DIR/err")" = 1

run_cmd "${MPI[@]}" -np 2 -x LOOM_LAUNCH_ID=a "$LOOM" train "${G[@]}" run.name=launch : \
  -np 2 -x LOOM_LAUNCH_ID=b "$LOOM" train "${G[@]}" run.name=launch
check "two LOOM_LAUNCH_IDs: refused" test "$RUN_RC" != 0
expect_err "two LOOM_LAUNCH_IDs: names rank 2's launch and rank 0's" \
  "rank 2 on $(hostname) belongs to another launch (Open MPI job"
expect_err "two LOOM_LAUNCH_IDs: both values" "LOOM_LAUNCH_ID b) than rank 0"

run_cmd env OMPI_COMM_WORLD_SIZE=2 timeout 60 "$LOOM" train "${G[@]}" parallel.dp=1 run.name=alone
check "launcher says 2 ranks, MPI joined 1: refused" test "$RUN_RC" != 0
expect_err "launcher says 2 ranks, MPI joined 1: says so" \
  "rank 0 on $(hostname) was started as one of 2 ranks, but MPI joined 1"

check "the refused jobs wrote no run directory" \
  test -z "$(ls -d "$WORK"/runs/mpmd_* "$WORK"/runs/launch_* "$WORK"/runs/alone_* 2>/dev/null)"
finish
