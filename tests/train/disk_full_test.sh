#!/usr/bin/env bash
# Full disk: the run directory lives on a small tmpfs this test mounts and fills, so that a
# write fails (1) between checkpoints (metrics.jsonl / train.log appends) and (2) during a
# checkpoint save. Each time the run must stop with an error naming the file and the cause,
# leave metrics.jsonl ending in a whole line, keep the newest complete checkpoint loadable and
# publish no partial one; after space is freed, `--resume latest` must finish with losses
# bitwise equal to an uninterrupted run; (3) as (1) on two ranks. Needs root (mount); exits 77 (ctest: skipped) when
# the mount is refused.
. "$(dirname "$0")/common.sh"
make_data || { echo "could not make test data"; exit 1; }
DISK="$WORK/disk"
mkdir -p "$DISK"
if ! mount -t tmpfs -o size=12m tmpfs "$DISK" 2>"$WORK/mount.err"; then
  echo "SKIP: cannot mount a tmpfs ($(cat "$WORK/mount.err")); the full-disk test needs root"
  exit 77
fi
trap 'umount "$DISK" 2>/dev/null; rm -rf "$WORK"' EXIT
export LOOM_REGISTRY=off
M=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64
  training.seq_len=32 training.micro_batch_size=2 training.steps=60 training.log_every=1
  data.train_shards="$WORK/train.bin" --quiet)

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
RUN=("$LOOM") # the job: one process, or (case 3) two ranks under mpirun
train() { "${RUN[@]}" train "${M[@]}" "$@"; }
train run.output_dir="$WORK/ref" >/dev/null || { echo "reference run failed"; exit 1; }
REF=$(ls -d "$WORK"/ref/*/)

fill() { # leave about $1 KiB free on the tmpfs
  dd if=/dev/zero of="$DISK/fill" bs=64k 2>/dev/null
  [ "$1" -gt 0 ] && truncate -s "-$1K" "$DISK/fill"
  sync
}
loadable() { # checkpoint dir: COMPLETE lists every file at its size, and loom can read them
  local kind size name ok=0
  [ -f "$1/COMPLETE" ] || return 1
  while read -r kind size name; do
    [ "$kind" = file ] || continue
    [ "$(stat -c %s "$1/$name" 2>/dev/null)" = "$size" ] || ok=1
  done <"$1/COMPLETE"
  [ $ok = 0 ] && "$LOOM" ckpt compare "$1" "$1" >/dev/null 2>&1
}
whole_lines() { # every line of the file is a JSON object ending in a newline
  [ -z "$(tail -c1 "$1")" ] && ! grep -qv '^{.*}$' "$1"
}

case_run() { # name, KiB left free, checkpoint.every for the resumed part, expected file
  local name=$1 free=$2 every=$3 want=$4 out="$DISK/$1"
  rm -rf "${DISK:?}"/*
  train run.output_dir="$out" checkpoint.every=4 --stop-after 4 >/dev/null ||
    { fail "$name: first part failed"; return; }
  local run
  run=$(ls -d "$out"/*/)
  run=${run%/}
  fill "$free"
  local err rc
  err=$(train run.output_dir="$out" checkpoint.every="$every" checkpoint.keep_last=1 --resume latest 2>&1 >/dev/null)
  rc=$?
  echo "  $name: exit $rc: $(echo "$err" | grep -m1 error | cut -c1-220)"
  check "$name: the run fails" test $rc != 0
  if [[ "$err" == *"cannot write '$run/"*"$want"*"No space left on device"* ]]; then pass; else
    fail "$name: the error does not name $want and the full disk: $err"; fi
  check "$name: exactly one error line" test "$(echo "$err" | grep -c 'loom train: error')" = 1
  check "$name: no abort" test "$(echo "$err" | grep -c 'MPI_ABORT')" = 0
  check "$name: metrics.jsonl ends in a whole line" whole_lines "$run/metrics.jsonl"
  check "$name: checkpoint_4 still loadable" loadable "$run/checkpoint_4"
  check "$name: no partial checkpoint published" test -z "$(ls -d "$run"/checkpoint_* | grep -v '/checkpoint_4$')"
  local reached
  reached=$(losses "$run" | wc -l)
  echo "  $name: stopped with $reached metrics lines"
  rm -f "$DISK/fill"
  train run.output_dir="$out" checkpoint.every="$every" checkpoint.keep_last=1 --resume latest >/dev/null 2>"$WORK/$name.err" ||
    { fail "$name: resume after freeing space failed: $(tail -2 "$WORK/$name.err")"; return; }
  if [ "$(losses "$REF")" = "$(losses "$run")" ]; then pass; else
    fail "$name: losses after the resume differ from the uninterrupted run"; fi
  local f same=1
  for f in "$REF"/final_checkpoint/*.safetensors; do cmp -s "$f" "$run/final_checkpoint/${f##*/}" || same=0; done
  check "$name: final weights identical" test $same = 1
  check "$name: no temporary entries left" test -z "$(find "$run" -name '*.tmp' -o -name '*.tmp.*')"
}

# (1) 4 KiB left: the appends to metrics.jsonl / train.log (~350 bytes a step) fail long
# before the next checkpoint (every 50 steps)
case_run between 4 50 ""
# (2) 1 MiB left: the logs fit, the checkpoint at step 8 (~2.4 MB) does not
case_run during 1024 8 "checkpoint_8.tmp/"
# (3) two ranks (dp=2): the failed append on rank 0 stops both ranks at the same step, with
# one error line and a clean exit (no MPI_Abort)
RUN=(mpirun --oversubscribe --bind-to none -np 2 "$LOOM")
export ASAN_OPTIONS=detect_leaks=0 # Open MPI's own start-up allocations (as in tests/train/parallel_*)
M+=(parallel.dp=2 training.micro_batch_size=1)
rm -rf "$WORK/ref"
train run.output_dir="$WORK/ref" >/dev/null || { echo "2-rank reference run failed"; exit 1; }
REF=$(ls -d "$WORK"/ref/*/)
case_run two-ranks 4 50 ""
finish
