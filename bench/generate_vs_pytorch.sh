#!/usr/bin/env bash
# `loom generate` against a PyTorch peer on GPT-2 124M with random weights (no download): the
# model is made by `loom train` (gpt2-124m, one step from its initialisation) and exported with
# `loom ckpt export`; bench/generate_torch.py runs a hand-written GPT-2 with a KV cache in
# PyTorch on that export, greedy, fp32, with the same threads. Cases: single stream (1 prompt)
# and batched (--batch prompts of one length), in fp32 and then in bf16 (loom --dtype bf16:
# bf16 weights and matmul inputs, fp32 accumulation and everything else fp32; PyTorch: the
# whole model in torch.bfloat16). Prefill and decode tokens/s as each side
# reports them (model loading excluded), the median of --repeats runs, and whether the two
# produced the same token ids (expected in fp32; in bf16 the two round differently). Not a CTest test: a benchmark on a possibly shared machine.
#
# usage: bench/generate_vs_pytorch.sh [path/to/loom] [--threads N] [--new N] [--batch B]
#                                     [--prompt-len P] [--repeats R] [--dtypes fp32,bf16]
#   defaults: threads = nproc, new = 64 tokens, batch = 8, prompt-len = 16, repeats = 3,
#             dtypes fp32,bf16
set -u
LOOM=${1:-build/loom}
[ $# -gt 0 ] && shift
THREADS=$(nproc) NEW=64 BATCH=8 PLEN=16 REPEATS=3 DTYPES=fp32,bf16
while [ $# -gt 0 ]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --new) NEW=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --prompt-len) PLEN=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --dtypes) DTYPES=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/loom-gen-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $THREADS threads, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== making gpt2-124m (loom train, 1 step) and its Hugging Face export" >&2
"$LOOM" data synth-text --out "$WORK/corpus.txt" --bytes 20000 --seed 1 >/dev/null &&
"$LOOM" data train-tokenizer --vocab-size 300 --out "$WORK/tok.json" "$WORK/corpus.txt" >/dev/null &&
"$LOOM" data tokenize --tokenizer "$WORK/tok.json" --out "$WORK/train.bin" "$WORK/corpus.txt" >/dev/null &&
"$LOOM" train model.preset=gpt2-124m training.seq_len=64 training.micro_batch_size=1 \
  training.steps=1 training.warmup_steps=0 data.train_shards="$WORK/train.bin" \
  run.output_dir="$WORK/runs" run.name=g --quiet >"$WORK/train.log" 2>&1 ||
  { echo "making the model failed:" >&2; tail -5 "$WORK/train.log" >&2; exit 1; }
CK=$(ls -d "$WORK"/runs/g_*/final_checkpoint)
"$LOOM" ckpt export "$CK" --out "$WORK/hf" >/dev/null || exit 1

prompts() { # prompts B: B rows of PLEN ids (distinct rows), "a,b,...;c,d,..."
  python3 -c 'import sys
B, P = int(sys.argv[1]), int(sys.argv[2])
print(";".join(",".join(str((97 * r + 31 * i + 7) % 50257) for i in range(P)) for r in range(B)))' \
    "$1" "$PLEN"
}
median() { python3 -c 'import statistics, sys; print("%.1f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }

printf "\n%-14s %14s %14s %14s %14s %9s %9s\n" case "loom prefill" "torch prefill" \
  "loom decode" "torch decode" "decode x" "same ids"
printf "%-14s %14s %14s %14s %14s %9s %9s\n" "" "tokens/s" "tokens/s" "tokens/s" "tokens/s" \
  "loom/pt" ""
for dt in ${DTYPES//,/ }; do
for B in 1 "$BATCH"; do
  P=$(prompts "$B")
  lp=() ld=() tp=() td=() same=yes
  for ((r = 0; r < REPEATS; r++)); do
    "$LOOM" generate "$CK" --prompt-ids "$P" --max-new-tokens "$NEW" --ignore-eos --json --dtype "$dt" \
      >"$WORK/loom.json" 2>"$WORK/loom.err" || { cat "$WORK/loom.err" >&2; exit 1; }
    /usr/bin/python3 "$HERE/generate_torch.py" "$WORK/hf" --prompts "$P" --new "$NEW" \
      --threads "$THREADS" --dtype "$dt" >"$WORK/torch.json" || exit 1
    read -r a b c d s < <(python3 - "$WORK" <<'PY'
import json, re, sys
w = sys.argv[1]
err = open(w + "/loom.err").read()
m = re.search(r"prefill (\d+) tokens in ([\d.]+) s .*decode (\d+) tokens in ([\d.]+) s", err)
lp, ld = int(m[1]) / float(m[2]), int(m[3]) / float(m[4])
t = json.load(open(w + "/torch.json"))
rows = [json.loads(l)["ids"] for l in open(w + "/loom.json")]
same = "yes" if rows == t["ids"] else "no"
print(lp, ld, t["prefill_tokens"] / t["prefill_s"], t["decode_tokens"] / t["decode_s"], same)
PY
)
    lp+=("$a") ld+=("$b") tp+=("$c") td+=("$d")
    [ "$s" = yes ] || same=no
  done
  mlp=$(median "${lp[@]}") mld=$(median "${ld[@]}") mtp=$(median "${tp[@]}") mtd=$(median "${td[@]}")
  ratio=$(python3 -c "print('%.2f' % ($mld / $mtd))")
  name=$([ "$B" = 1 ] && echo "single $dt" || echo "batch $B $dt")
  printf "%-14s %14s %14s %14s %14s %9s %9s\n" "$name" "$mlp" "$mtp" "$mld" "$mtd" "$ratio" "$same"
done
done
echo
echo "gpt2-124m, prompts of $PLEN tokens, $NEW new tokens (greedy), median of $REPEATS runs;"
echo "decode tokens/s = tokens fed to decode steps / decode time (sampling included)"
