#!/usr/bin/env bash
# Running out of memory is a clear message and a clean exit, never a silent abort: under
# `ulimit -d` (RLIMIT_DATA: the private writable memory a process may map; start-up needs
# ~60 MB) loom's own large allocations fail -- the decoder's activation arena of `loom train`
# and `loom eval` with a huge training.micro_batch_size, the weights of `loom ckpt import` of a
# model with a 4M-token vocabulary (a sparse file: 2 GiB of weights, no disk) -- and each says
# what it was allocating, how many bytes (and in human units), where (file:line), and what to
# do, then exits with status 1 (not a signal: no SIGABRT, no core dump), leaving no run
# directory, checkpoint or temporary directory behind. Under mpirun, the rank that runs out
# names itself and takes the job down at once (MPI_Abort through core's out-of-memory hook)
# instead of leaving the other rank in a collective until parallel.timeout_s.
set -u
LOOM=${1:?usage: $0 path/to/loom}
WORK=$(mktemp -d /tmp/loom-oom.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "$0")/../loom.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export TMPDIR="$WORK/tmp" # eval's and import's temporary directories: checked empty below
mkdir -p "$TMPDIR"
LIMIT_KB=1000000

C=$WORK/corpus.txt
"$LOOM" data synth-text --out "$C" --bytes 60000 --seed 3 >/dev/null &&
  "$LOOM" data train-tokenizer --vocab-size 300 --out "$WORK/tok.json" "$C" >/dev/null &&
  "$LOOM" data tokenize --tokenizer "$WORK/tok.json" --out "$WORK/train.bin" "$C" >/dev/null ||
  { echo "could not make test data"; exit 1; }
base=(model.preset=tiny-gpt2 model.vocab_size=300 training.steps=2 training.seq_len=32
  training.micro_batch_size=2 data.train_shards="$WORK/train.bin" data.tokenizer="$WORK/tok.json")
"$LOOM" train "${base[@]}" run.output_dir="$WORK/runs" run.name=small --quiet >/dev/null &&
  "$LOOM" ckpt export "$WORK"/runs/small_*/final_checkpoint --out "$WORK/hf" >/dev/null ||
  { echo "could not make the test checkpoint"; exit 1; }
CKPT=$(ls -d "$WORK"/runs/small_*/final_checkpoint)

limited() { run_cmd bash -c 'ulimit -d "$0" && exec "$@"' "$LIMIT_KB" "$LOOM" "$@"; }

# expect_oom WHAT WHERE: the last command ran out of memory and said so
expect_oom() {
  local what=$1 where=$2 ok=1
  [ "$RUN_RC" = 1 ] || { fail "$what: exit status $RUN_RC, expected 1 (128+ is a signal)"; ok=0; }
  for want in "loom: out of memory: cannot allocate" "$where" "training.micro_batch_size" \
      "training.activation_checkpointing=true" "parallel.zero" "smaller model" "free memory"; do
    [[ "$RUN_ERR" == *"$want"* ]] || { fail "$what: stderr lacks '$want'"; ok=0; }
  done
  grep -Eq 'cannot allocate [0-9.]+ (KiB|MiB|GiB|TiB) \([0-9]+ bytes\)' <<<"$RUN_ERR" ||
    { fail "$what: no size in bytes and human units"; ok=0; }
  grep -Eq '(at|\() ?src/[a-z_/]+\.c:[0-9]+' <<<"$RUN_ERR" || { fail "$what: no file:line"; ok=0; }
  if grep -Eqi 'internal error|abort|core dumped' <<<"$RUN_ERR"; then
    fail "$what: an abort, not a message"; ok=0
  fi
  if [ $ok = 1 ]; then pass; echo "  $what: $(grep -m1 'out of memory' <<<"$RUN_ERR")"
  else run_show; fi
}
nothing_in() { # what, directory that must be absent or empty
  check "$1: nothing left in $2" test ! -e "$2" -o -z "$(ls -A "$2" 2>/dev/null)"
}

# loom train: the activation arena of 4096 x 256 tokens (~44 GiB)
limited train "${base[@]}" training.micro_batch_size=4096 training.seq_len=256 \
  run.output_dir="$WORK/oom_runs" --quiet
expect_oom "train, activation arena" "src/model/"
nothing_in "train" "$WORK/oom_runs"

# loom eval of a loom checkpoint with the same batch
limited eval "$CKPT" --data "$WORK/train.bin" --batches 1 training.micro_batch_size=4096 \
  training.seq_len=256
expect_oom "eval, activation arena" "src/model/"
nothing_in "eval" "$TMPDIR"

# loom ckpt import of a model whose weights (2 GiB) exceed the limit
PYTHON=${LOOM_PYTHON:-python3}
"$PYTHON" - "$WORK/hf" "$WORK/hf_big" 4194304 <<'EOF' || fail "could not write the big model"
# the exported tiny model with a vocab_size-row embedding, its rows a hole in a sparse file
import json, os, struct, sys
src, dst, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst)
cfg = json.load(open(f'{src}/config.json'))
cfg['vocab_size'] = vocab
json.dump(cfg, open(f'{dst}/config.json', 'w'))
b = open(f'{src}/model.safetensors', 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
head, data = json.loads(b[8:8 + n]), b[8 + n:]
out, parts, off = {}, [], 0
for k, v in head.items():
    if k == '__metadata__':
        out[k] = v
        continue
    lo, hi = v['data_offsets']
    chunk = data[lo:hi]
    if k == 'wte.weight':
        v['shape'][0] = vocab
        chunk = None
    size = vocab * v['shape'][1] * 4 if chunk is None else hi - lo
    out[k] = dict(v, data_offsets=[off, off + size])
    parts.append((off, chunk))
    off += size
h = json.dumps(out).encode()
h += b' ' * (-len(h) % 8)
with open(f'{dst}/model.safetensors', 'wb') as f:
    f.write(struct.pack('<Q', len(h)) + h)
    for o, c in parts:
        if c is not None:
            f.seek(8 + len(h) + o)
            f.write(c)
    f.truncate(8 + len(h) + off)
EOF
limited ckpt import "$WORK/hf_big" --out "$WORK/imported"
expect_oom "ckpt import, weights" "for the imported model's weights (src/ckpt/hf_import.c:"
check "ckpt import: no checkpoint written" test ! -e "$WORK/imported"
check "ckpt import: no temporary checkpoint left" \
  test -z "$(ls -d "$WORK"/imported.tmp.* 2>/dev/null)"
nothing_in "import" "$TMPDIR"

# two ranks, one under the limit: it names its rank and the job ends at once
if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  dp2=(train "${base[@]}" training.micro_batch_size=16 training.seq_len=256 parallel.dp=2
    checkpoint.save_final=false run.output_dir="$WORK/oom_dp2" --quiet)
  start=$(date +%s)
  run_cmd timeout 200 mpirun --oversubscribe --bind-to none -np 1 "$LOOM" "${dp2[@]}" : -np 1 \
    bash -c 'ulimit -d 100000 && exec "$@"' "$LOOM" "$LOOM" "${dp2[@]}"
  took=$(($(date +%s) - start))
  if [ "$RUN_RC" != 0 ] && [ "$RUN_RC" != 124 ] &&
    [[ "$RUN_ERR" == *"out of memory"*"on rank 1 of 2"* ]]; then
    pass
    echo "  dp=2, rank 1 limited: exit $RUN_RC after ${took}s:" \
      "$(grep -m1 'out of memory' <<<"$RUN_ERR")"
  else fail "dp=2 with rank 1 out of memory: exit status $RUN_RC after ${took}s"; run_show; fi
  check "dp=2: the job ended long before parallel.timeout_s (${took}s)" test "$took" -lt 60
  nothing_in "dp=2" "$WORK/oom_dp2"
fi
finish
