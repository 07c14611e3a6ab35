#!/usr/bin/env bash
# kill -9 campaign: a seeded series of kills of whole jobs and of single ranks — at random
# times, and at injected points inside checkpoint saves and pruning (LOOM_FAULT=kill-save,
# kill-marker, kill-prune, kill) — each followed by `--resume latest` or run under
# `--max-restarts`. After every kill no directory named checkpoint_<N> may be unloadable
# (COMPLETE marker present, every listed file at its listed size, every tensor file valid);
# at the end every trial's losses equal the uninterrupted run's bitwise (exact decimal text),
# its final weights and surviving checkpoints are byte-identical to the uninterrupted run's
# (in the same layout: dp+ZeRO-1, tp, pp or ZeRO-3, one picked per trial),
# no temporary entries are left and keep_last holds.
#   LOOM_CRASH_TRIALS (default 24; bench/crash_campaign.sh runs more), LOOM_CRASH_SEED (default 12)
. "$(dirname "$0")/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }
TRIALS=${LOOM_CRASH_TRIALS:-24}
RANDOM=${LOOM_CRASH_SEED:-12}
export LOOM_REGISTRY=off
STEPS=12 EVERY=2 KEEP=2
M=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64
  training.seq_len=32 training.steps=$STEPS training.log_every=1
  checkpoint.every=$EVERY checkpoint.keep_last=$KEEP data.train_shards="$WORK/train.bin" --quiet)
# 2-rank layouts, one per trial (each compared with its own uninterrupted run): data parallel
# with ZeRO-1 (one optimizer shard per rank), tensor parallel, pipeline, ZeRO-3 (sharded
# parameters: a model file per rank)
LAYOUTS=("parallel.dp=2 parallel.zero=1 training.micro_batch_size=1"
  "parallel.tp=2 training.micro_batch_size=2"
  "parallel.pp=2 training.micro_batch_size=2 training.grad_accum=2"
  "parallel.dp=2 parallel.zero=3 training.micro_batch_size=1")
LA=()
# the 2-rank job: mpirun directly (whole-job kills), or the supervising launcher
job() { "${MPIRUN[@]}" -np 2 "$LOOM" train "${M[@]}" "${LA[@]}" "$@"; }
supervised() { "$LOOM" train "${M[@]}" "${LA[@]}" --nproc 2 "$@"; }

declare -A REFS
use_layout() { # index: sets LA, REF, REF_LOSSES (the uninterrupted run, made once per layout)
  read -r -a LA <<<"${LAYOUTS[$1]}"
  if [ -z "${REFS[$1]:-}" ]; then
    job run.output_dir="$WORK/ref$1" >/dev/null 2>"$WORK/ref$1.err" || { cat "$WORK/ref$1.err"; exit 1; }
    REFS[$1]=$(ls -d "$WORK"/ref$1/*/)
  fi
  REF=${REFS[$1]}
  REF_LOSSES=$(losses "$REF")
}

# every checkpoint_<N> of a run directory is complete and loadable
check_loadable() { # what, run_dir
  local d bad="" kind size name
  for d in "$2"/checkpoint_*; do
    [ -e "$d" ] || continue
    case "$d" in *.tmp) continue ;; esac
    if [ ! -f "$d/COMPLETE" ]; then bad="$bad $(basename "$d"):no-marker"; continue; fi
    while read -r kind size name; do
      [ "$kind" = file ] || continue
      [ "$(stat -c %s "$d/$name" 2>/dev/null)" = "$size" ] || bad="$bad $(basename "$d")/$name"
    done <"$d/COMPLETE"
    "$LOOM" ckpt inspect "$d" >/dev/null 2>&1 || bad="$bad $(basename "$d"):inspect"
  done
  if [ -z "$bad" ]; then pass; else fail "$1: unloadable checkpoints:$bad"; fi
}

descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
gone() { local p; for p in "$@"; do while kill -0 "$p" 2>/dev/null; do sleep 0.01; done; done; }

# whole job under mpirun, killed with SIGKILL (mpirun and both ranks at once) after $1 ms
kill_job_after() { # ms, output_dir, extra args...
  local ms=$1 out=$2; shift 2
  job run.output_dir="$out" "$@" >/dev/null 2>&1 &
  local pid=$!
  sleep "$(printf '0.%03d' "$ms")"
  local all
  all=$(descendants "$pid")
  kill -9 $all 2>/dev/null
  wait "$pid" 2>/dev/null
  gone $all
}

# one rank of a supervised job, killed with SIGKILL after $1 ms
kill_rank_after() { # ms, rank index (0/1), output_dir
  local out=$3
  supervised --max-restarts 3 run.output_dir="$out" >/dev/null 2>"$out.err" &
  local sup=$! p mp="" victim=""
  sleep "$(printf '0.%03d' "$1")"
  for p in $(descendants "$sup"); do [ "$(ps -o comm= -p "$p")" = mpirun ] && mp=$p; done
  [ -n "$mp" ] && victim=$(pgrep -P "$mp" | sort -n | sed -n "$(($2 + 1))p")
  [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
  wait "$sup"
}

# resume the newest run until it completes (a fresh start when no checkpoint was completed)
finish_by_resume() { # output_dir, what
  local out=$1 tries=0 err
  # the kill came after the end: the run is complete (and --resume would refuse it)
  grep -qs '"status": "finished"' "$(ls -td "$out"/*/ 2>/dev/null | head -1)summary.json" && return 0
  while [ $tries -lt 4 ]; do
    tries=$((tries + 1))
    if err=$(job run.output_dir="$out" --resume latest 2>&1 >/dev/null); then return 0; fi
    case "$err" in
      *"no complete checkpoint"*|*"no run under"*|*"cannot read the runs directory"*)
        rm -rf "$out"; job run.output_dir="$out" >/dev/null 2>&1 && return 0 ;;
    esac
  done
  fail "$2: could not finish by --resume latest: $(echo "$err" | grep -m2 "loom")"
  return 1
}

verify() { # what, output_dir
  local what=$1 d
  d=$(ls -td "$2"/*/ 2>/dev/null | head -1)
  d=${d%/}
  if [ -z "$d" ] || [ ! -f "$d/summary.json" ]; then fail "$what: no finished run"; return; fi
  if [ "$(losses "$d")" = "$REF_LOSSES" ]; then pass; else
    fail "$what: losses differ from the uninterrupted run"; diff <(echo "$REF_LOSSES") <(losses "$d") | head -5 >&2; fi
  local f same=1
  for f in "$REF"/final_checkpoint/*.safetensors; do
    cmp -s "$f" "$d/final_checkpoint/$(basename "$f")" || same=0
  done
  check "$what: final checkpoint byte-identical" test $same = 1
  for c in "$d"/checkpoint_*; do # surviving periodic checkpoints equal the reference's
    [ -d "$REF/$(basename "$c")" ] || continue
    for f in "$REF/$(basename "$c")"/*.safetensors; do cmp -s "$f" "$c/$(basename "$f")" || same=0; done
  done
  check "$what: surviving checkpoints byte-identical" test $same = 1
  check_loadable "$what (end)" "$d"
  check "$what: no temporary entries left" test -z "$(find "$d" -name '*.tmp' -o -name '*.tmp.*' -o -name '*.old.*')"
  check "$what: at most keep_last=$KEEP periodic checkpoints" test "$(ls -d "$d"/checkpoint_* 2>/dev/null | wc -l)" -le $KEEP
}

declare -A KINDS LAYS
HIT=0 # random-time kills that landed while the job ran (the others came after its end)
start=$SECONDS
for t in $(seq 1 "$TRIALS"); do
  out="$WORK/t$t"
  kind=$(( (t - 1) % 6 )) # every kind in turn; what, where and when are drawn
  rank=$((RANDOM % 2))
  ck=$(( (RANDOM % (STEPS / EVERY)) * EVERY + EVERY ))   # a periodic checkpoint, or the final one
  ckname=checkpoint_$ck
  [ "$ck" = "$STEPS" ] && ckname=final_checkpoint
  ms=$((RANDOM % 900 + 100))
  lay=$((RANDOM % ${#LAYOUTS[@]}))
  use_layout "$lay"
  LAYS[$lay]=$(( ${LAYS[$lay]:-0} + 1 ))
  case $kind in
    0) what="t$t: whole job killed after ${ms} ms, --resume latest"
       kill_job_after "$ms" "$out"
       [ -z "$(ls "$out"/*/summary.json 2>/dev/null)" ] && HIT=$((HIT + 1))
       [ -d "$out" ] && for r in "$out"/*/; do check_loadable "$what (after kill)" "$r"; done
       # sometimes kill the resumed job again
       if [ $((RANDOM % 2)) = 0 ] && [ -n "$(ls -d "$out"/*/ 2>/dev/null)" ]; then
         kill_job_after $((RANDOM % 600 + 100)) "$out" --resume latest
         for r in "$out"/*/; do check_loadable "$what (after 2nd kill)" "$r"; done
       fi
       finish_by_resume "$out" "$what" ;;
    1) what="t$t: rank $rank killed after ${ms} ms, --max-restarts 3"
       mkdir -p "$out"; kill_rank_after "$ms" "$rank" "$out" || fail "$what: exit $? ($(tail -2 "$out.err"))"
       grep -q "restart 1 of 3" "$out"/*/train.log 2>/dev/null && HIT=$((HIT + 1)) ;;
    2) what="t$t: rank $rank killed while writing $ckname, --resume latest"
       LOOM_FAULT=kill-save:$rank:$ck job run.output_dir="$out" >/dev/null 2>&1
       for r in "$out"/*/; do check_loadable "$what (after kill)" "$r"; done
       check "$what: the killed checkpoint is not visible" test ! -e "$(ls -d "$out"/*/ | head -1)$ckname"
       finish_by_resume "$out" "$what" ;;
    3) what="t$t: rank 0 killed between COMPLETE and the rename of $ckname, --max-restarts 2"
       rm -f "$WORK/once$t"
       LOOM_FAULT_ONCE="$WORK/once$t" LOOM_FAULT=kill-marker:0:$ck supervised --max-restarts 2 \
         run.output_dir="$out" >/dev/null 2>"$out.err" || fail "$what: exit $? ($(tail -2 "$out.err"))"
       check "$what: the fault fired" test -e "$WORK/once$t" ;;
    4) pr=$(( (RANDOM % (STEPS / EVERY - KEEP - 1) + 1) * EVERY )) # a checkpoint that gets pruned
       what="t$t: rank 0 killed while pruning checkpoint_$pr, --resume latest"
       LOOM_FAULT=kill-prune:0:$pr job run.output_dir="$out" >/dev/null 2>&1
       for r in "$out"/*/; do check_loadable "$what (after kill)" "$r"; done
       finish_by_resume "$out" "$what" ;;
    5) st=$((RANDOM % STEPS + 1))
       what="t$t: rank $rank killed before step $st, --max-restarts 1"
       rm -f "$WORK/once$t"
       LOOM_FAULT_ONCE="$WORK/once$t" LOOM_FAULT=kill:$rank:$st supervised --max-restarts 1 \
         run.output_dir="$out" >/dev/null 2>"$out.err" || fail "$what: exit $? ($(tail -2 "$out.err"))"
       d=$(ls -d "$out"/*/ | head -1)
       check "$what: the restart is in train.log" grep -q "restart 1 of 1 after: rank $rank was killed by signal 9" "$d/train.log" ;;
  esac
  KINDS[$kind]=$(( ${KINDS[$kind]:-0} + 1 ))
  verify "$what [${LAYOUTS[$lay]}]" "$out"
done
echo "  random-time kills that interrupted a job: $HIT of $(( ${KINDS[0]:-0} + ${KINDS[1]:-0} ))"
echo "  by layout: $(for l in "${!LAYOUTS[@]}"; do printf '[%s]=%s ' "${LAYOUTS[$l]}" "${LAYS[$l]:-0}"; done)"
echo "  $TRIALS trials in $((SECONDS - start)) s; by kind (0 job kill, 1 rank kill, 2 in save, 3 before rename, 4 in prune, 5 at a step): $(for k in 0 1 2 3 4 5; do printf '%s=%s ' $k "${KINDS[$k]:-0}"; done)"
finish
