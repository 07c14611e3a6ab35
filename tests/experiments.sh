# Shared by the experiment-management CLI tests: a work dir, tiny demo-style data made by loom
# itself, a tiny base config, assertion helpers that count passes and failures, and the
# check that a sweep's summary.csv / summary.txt say what each run's own files say.
set -u
LOOM=$(realpath "${1:?usage: $0 path/to/loom}")
WORK=$(mktemp -d /tmp/loom-exp-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 NO_COLOR=1
unset LOOM_REGISTRY LOOM_SWEEP LOOM_SWEEP_ID
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
. "$(dirname "${BASH_SOURCE[0]}")/loom.sh" # assert.sh and run_loom
make_data() { # tiny corpus, a 300-token tokenizer trained on it, its token shard, a base config
  "$LOOM" data synth-text --out "$WORK/corpus.txt" --bytes 60000 --seed 3 >/dev/null &&
  "$LOOM" data train-tokenizer --vocab-size 300 --out "$WORK/tok.json" "$WORK/corpus.txt" >/dev/null &&
  "$LOOM" data tokenize --tokenizer "$WORK/tok.json" --out "$WORK/train.bin" "$WORK/corpus.txt" >/dev/null &&
  cat > "$WORK/base.yaml" <<YAML
run: {output_dir: $WORK/runs}
model: {preset: tiny-gpt2, vocab_size: 300, hidden: 32, heads: 4, layers: 1, max_seq: 32}
training: {seq_len: 16, micro_batch_size: 2, steps: 6, log_every: 1, grad_clip: 0, warmup_steps: 1}
data: {train_shards: $WORK/train.bin, tokenizer: $WORK/tok.json}
YAML
}
# column N (by header name) of a CSV line; no quoted commas in what the tests read
csv_col() { # file column_name -> values, one per data row
  awk -F, -v name="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next } { print $c }' "$1"
}
csv_row() { # file key_column key value_column
  awk -F, -v k="$2" -v key="$3" -v v="$4" 'NR == 1 { for (i = 1; i <= NF; i++) { if ($i == k) kc = i; if ($i == v) vc = i }; next } $kc == key { print $vc }' "$1"
}
close_to() { # a b tolerance (absolute)
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= t) }'
}
# Every SUCCESS row of a sweep summary agrees with its run's metrics.jsonl / summary.json.
check_summary_numbers() { # log_dir
  local dir=$1 csv=$1/summary.csv txt=$1/summary.txt name
  for name in $(awk -F, 'NR > 1 && $2 == "SUCCESS" { print $1 }' "$csv"); do
    local run m
    run=$(csv_row "$csv" name "$name" run_dir)
    m=$run/metrics.jsonl
    check "$name: run directory known" test -f "$m"
    # from the run's own per-step lines: steps, last loss, mean step time without step 1
    local steps loss avg
    steps=$(grep -c '"loss": ' "$m") # step lines (validation lines carry "val_loss")
    loss=$(grep '"loss": ' "$m" | sed -n '$s/.*"loss": \([^,]*\),.*/\1/p')
    avg=$(sed -n 's/.*"step_time": \([^,]*\),.*/\1/p' "$m" | awk 'NR > 1 { s += $1; n++ } END { printf "%.9f", s / n }')
    check "$name: steps in summary.csv" test "$(csv_row "$csv" name "$name" steps)" = "$steps"
    check "$name: final loss in summary.csv = metrics.jsonl" close_to "$(csv_row "$csv" name "$name" final_loss)" "$loss" 1e-12
    check "$name: avg iteration time in summary.csv = metrics.jsonl" close_to "$(csv_row "$csv" name "$name" avg_iter_time_s)" "$avg" 2e-6
    local tps
    tps=$(sed -n 's/.*"tokens_per_s": \([^,]*\),.*/\1/p' "$run/summary.json")
    check "$name: tokens/s in summary.csv = summary.json" close_to "$(csv_row "$csv" name "$name" tokens_per_s)" "$tps" 1e-6
    # MFU: the run's own figure (summary.json's fraction, in percent; %.6g in the CSV), or none
    local mfu
    mfu=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.17g" % (100 * d["mfu"]) if "mfu" in d else "")' "$run/summary.json")
    if [ -n "$mfu" ]; then
      check "$name: MFU in summary.csv = summary.json's" close_to "$(csv_row "$csv" name "$name" mfu_percent)" "$mfu" "$(awk -v m="$mfu" 'BEGIN { print 1e-5 * m }')"
    else
      check "$name: no MFU in summary.csv (the run recorded none)" test -z "$(csv_row "$csv" name "$name" mfu_percent)"
    fi
    # the human-readable table: | name | status | ranks | avg | it/s | tok/s | mfu | loss | mem
    local row
    row=$(grep "^$name " "$txt" | tr -d ' ')
    check "$name: row in summary.txt" test -n "$row"
    check "$name: summary.txt avg iteration time" close_to "$(echo "$row" | cut -d'|' -f4)" "$avg" 2e-6
    check "$name: summary.txt iterations/s" close_to "$(echo "$row" | cut -d'|' -f5)" "$(awk -v a="$avg" 'BEGIN { print 1 / a }')" "$(awk -v a="$avg" 'BEGIN { print 0.0006 + 1e-5 / a / a }')"
    check "$name: summary.txt final loss" close_to "$(echo "$row" | cut -d'|' -f8)" "$loss" 6e-7
    check "$name: summary.txt tokens/s" close_to "$(echo "$row" | cut -d'|' -f6)" "$tps" 0.051
  done
}
