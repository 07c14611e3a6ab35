#!/usr/bin/env bash
# A 16384-token sequence that fits in a per-process memory limit only with context
# parallelism: under `ulimit -d` (RLIMIT_DATA: the private writable memory a process may
# map, so MPI's shared segments and the libraries' text do not count) of 256 MB, one process
# (cp=1) cannot allocate its activation arena (393 MB planned: saved activations of 2 layers of
# a 16k-token sequence, test_cp_memory.c), while each of 4 cp ranks (T/4 tokens, 110 MB
# planned, 147 MB peak resident) trains. Without the limit both compute the same loss (1e-5
# relative: equivalence_test.sh's fp32 tolerance) and the peak resident memory of the
# largest cp rank is below 45% of one process's (measured 146.5 vs 407.2 MB: 36%; the
# activations shrink 4x, the binary, MPI and parameters do not).
. "$(dirname "$0")/parallel_common.sh"
"$LOOM" data synth-text --out "$WORK/corpus.txt" --bytes 60000 --seed 3 >/dev/null &&
  "$LOOM" data train-tokenizer --vocab-size 300 --out "$WORK/tok.json" "$WORK/corpus.txt" >/dev/null &&
  for i in 1 2 3 4 5 6 7; do cat "$WORK/corpus.txt"; done >"$WORK/long.txt" &&
  "$LOOM" data tokenize --tokenizer "$WORK/tok.json" --out "$WORK/train.bin" "$WORK/long.txt" >/dev/null ||
  { echo "could not make test data"; exit 1; }

LONG=(model.preset=tiny-llama model.vocab_size=301 model.vocab_pad_multiple=1 model.layers=2
  model.hidden=128 model.heads=2 model.kv_heads=1 model.intermediate=256 model.max_seq=16384
  training.seq_len=16384 training.micro_batch_size=1 training.grad_accum=1 training.steps=1
  data.train_shards="$WORK/train.bin" checkpoint.save_final=false)
LIMIT_KB=256000

# one process under the limit: refused at the arena allocation, no run completes
if (ulimit -d $LIMIT_KB; exec "$LOOM" train "${LONG[@]}" run.name=limited_cp1 \
      run.output_dir="$WORK/limited" --quiet) >"$WORK/limited_cp1.log" 2>&1; then
  fail "cp=1 trained a 16k-token sequence within ulimit -d $LIMIT_KB KB; the limit shows nothing"
elif grep -q "out of memory" "$WORK/limited_cp1.log"; then
  pass; echo "  cp=1 under ulimit -d $LIMIT_KB KB: $(grep -o 'out of memory.*' "$WORK/limited_cp1.log" | head -1)"
else fail "cp=1 under the limit failed otherwise: $(tail -2 "$WORK/limited_cp1.log")"; fi

# four cp ranks under the same per-process limit
if timeout 300 "${MPIRUN[@]}" -np 4 bash -c "ulimit -d $LIMIT_KB; exec \"\$0\" \"\$@\"" "$LOOM" train \
    "${LONG[@]}" parallel.cp=4 run.name=limited_cp4 run.output_dir="$WORK/runs" --quiet \
    >"$WORK/limited_cp4.log" 2>&1; then
  pass; echo "  cp=4 under ulimit -d $LIMIT_KB KB per rank: trained"
else fail "cp=4 under the limit: $(tail -3 "$WORK/limited_cp4.log")"; fi

# the same step without the limit: losses and peak resident memory
train long_cp1 1 "${LONG[@]}"
train long_cp4 4 "${LONG[@]}" parallel.cp=4
close_losses long_cp1 long_cp4 1e-5
peak() { sed -n 's/.*"peak_rss_mb": \([0-9.]*\).*/\1/p' "$(run_dir "$1")/summary.json"; }
p1=$(peak long_cp1) p4=$(peak long_cp4)
if awk -v a="$p1" -v b="$p4" 'BEGIN { exit !(b > 0 && b < 0.45 * a) }'; then
  pass; echo "  peak resident memory: cp=1 $p1 MB, cp=4 $p4 MB per rank (largest rank)"
else fail "peak resident memory: cp=4 $p4 MB is not below 45% of cp=1's $p1 MB"; fi
finish
