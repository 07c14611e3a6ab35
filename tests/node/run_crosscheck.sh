#!/usr/bin/env bash
# CTest driver of the JavaScript tokenizer cross-checks (registered in tests/data/tests.cmake).
#   run_crosscheck.sh setup LOOM WORK     npm ci in tests/node when node_modules is missing or
#                                         older than package-lock.json; build under WORK: GPT-2's
#                                         tokenizer.json (scripts/build_gpt2_tokenizer.mjs), a
#                                         Qwen2-style one from it, and one trained by loom
#   run_crosscheck.sh gpt2|qwen2|trained LOOM WORK   compare loom with the JS libraries
# Fails (never skips) when node or npm is missing.
set -euo pipefail
mode=${1:?mode}; loom=${2:?loom binary}; work=${3:?work dir}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
corpus=$root/tests/data/corpus_varied.txt

die() { echo "FAIL: $*" >&2; exit 1; }
command -v node >/dev/null 2>&1 ||
  die "node is not installed; the tokenizer cross-checks need Node.js >= 18 and npm (Debian: apt-get install nodejs npm)"

setup() {
  local stamp=$here/node_modules/.package-lock.json
  if [ ! -f "$stamp" ] || [ "$here/package-lock.json" -nt "$stamp" ]; then
    command -v npm >/dev/null 2>&1 || die "npm is not installed (Debian: apt-get install npm)"
    echo "installing the JS tokenizers: npm ci in $here"
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) || die "npm ci failed in $here"
  fi
  mkdir -p "$work"
  node "$root/scripts/build_gpt2_tokenizer.mjs" "$work/gpt2.json"
  node "$here/make_qwen2_style.mjs" "$work/gpt2.json" "$work/qwen2.json"
  "$loom" data synth-text --out "$work/synth.txt" --bytes 300000 --seed 3
  "$loom" data train-tokenizer --vocab-size 1000 --out "$work/trained.json" "$corpus" "$work/synth.txt"
}

check() { # tokenizer, extra args
  local tok=$1; shift
  [ -f "$work/$tok.json" ] || die "$work/$tok.json is missing: run the data_node_setup test first"
  node "$here/crosscheck.mjs" --loom "$loom" --tokenizer "$work/$tok.json" --corpus "$corpus" \
    --work "$work/$tok" --fuzz 300 --seed 1 "$@"
}

case $mode in
  setup) setup ;;
  gpt2) check gpt2 --tiktoken r50k_base ;;
  qwen2) check qwen2 ;;
  trained) check trained ;;
  *) die "unknown mode '$mode' (setup | gpt2 | qwen2 | trained)" ;;
esac
