# Shared by the train CLI tests: a work dir, the demo-style data made by loom itself, and
# small assertion helpers that count passes and failures.
set -u
LOOM=${1:?usage: $0 path/to/loom}
WORK=$(mktemp -d /tmp/loom-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../loom.sh" # assert.sh and run_loom
make_data() { # tiny corpus, a 300-token tokenizer trained on it, and its token shard
  "$LOOM" data synth-text --out "$WORK/corpus.txt" --bytes 120000 --seed 3 >/dev/null &&
  "$LOOM" data train-tokenizer --vocab-size 300 --out "$WORK/tok.json" "$WORK/corpus.txt" >/dev/null &&
  "$LOOM" data tokenize --tokenizer "$WORK/tok.json" --out "$WORK/train.bin" "$WORK/corpus.txt" >/dev/null
}
# losses of a run as text, one per line (exact decimal of the double: bitwise comparison)
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1/metrics.jsonl"; }
