#!/usr/bin/env bash
# `loom data tokenize` and `train-tokenizer` as a user runs them on corpora:
#  - on 1, 2 and 4 threads the shard is byte-identical, and equal to the whole file's ids from
#    `loom data encode`;
#  - JSON Lines (--field), .gz, .zst and .jsonl.gz give the stream the plain files give
#    (one document a line, each ended by <|endoftext|>);
#  - --shard-size writes shards and a manifest; training reads the manifest, the directory
#    and the single shard of the same stream to the same losses, bit for bit;
#  - progress: periodic lines when stderr is not a terminal, one refreshed line on a
#    terminal, nothing with --quiet;
#  - refused with the file (and line) named, no output left and an earlier output untouched:
#    empty and whitespace-only inputs (train-tokenizer too), a JSON Lines line that is not
#    JSON or lacks the field, JSON Lines without a document, damaged gzip/zstd data, bad
#    --shard-size.
# usage: tokenize_test.sh LOOM
. "$(dirname "$0")/../train/common.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
make_data || { echo "could not make test data"; exit 1; }
T="$WORK/tok.json"
"$LOOM" data synth-text --out "$WORK/big.txt" --bytes 2500000 --seed 4 >/dev/null

# ids FILE: the tokens of a shard, one line, space-separated
ids() {
  python3 - "$1" <<'EOF'
import struct, sys
b = open(sys.argv[1], "rb").read()
dtype, n = struct.unpack_from("<IQ", b, 12)
fmt = "<%d%s" % (n, "H" if dtype == 1 else "I")
print(" ".join(map(str, struct.unpack_from(fmt, b, 64))))
EOF
}
tok() { "$LOOM" data tokenize --tokenizer "$T" --quiet "$@"; }

# ---- threads: the same bytes, and the whole file's encoding -----------------------------------
for th in 1 2 4; do
  run_loom data tokenize --tokenizer "$T" --out "$WORK/t$th.bin" --threads "$th" --quiet "$WORK/big.txt"
  expect_rc "$th threads" 0
  expect_out "$th threads: the summary" "on $th thread"
done
check "2 threads = 1 thread, byte for byte" cmp -s "$WORK/t1.bin" "$WORK/t2.bin"
check "4 threads = 1 thread, byte for byte" cmp -s "$WORK/t1.bin" "$WORK/t4.bin"
"$LOOM" data encode --tokenizer "$T" "$WORK/big.txt" >"$WORK/whole.ids"
ids "$WORK/t4.bin" >"$WORK/t4.ids"
check "the shard holds the whole file's encoding" cmp -s "$WORK/whole.ids" "$WORK/t4.ids"

# ---- formats ----------------------------------------------------------------------------------
head -c 30000 "$WORK/big.txt" >"$WORK/a.txt"
tail -c 20000 "$WORK/big.txt" >"$WORK/b.txt"
tok --out "$WORK/ab.bin" --eot "$WORK/a.txt" "$WORK/b.txt" >/dev/null
python3 - "$WORK" <<'EOF'
import json, sys
w = sys.argv[1]
docs = [open(f"{w}/{n}.txt", encoding="utf-8").read() for n in "ab"]
with open(f"{w}/ab.jsonl", "w") as f:
    f.write(json.dumps({"id": 1, "text": docs[0]}) + "\n\n   \n")
    f.write(json.dumps({"id": 2, "text": ""}) + "\n")          # blank text: skipped
    f.write(json.dumps({"id": 3, "text": docs[1]}) + "\n")
with open(f"{w}/content.jsonl", "w") as f:
    for d in docs:
        f.write(json.dumps({"content": d, "meta": {"n": 1}}) + "\n")
EOF
run_loom data tokenize --tokenizer "$T" --out "$WORK/j.bin" --quiet "$WORK/ab.jsonl"
expect_rc "JSON Lines" 0
expect_out "JSON Lines: the skipped blank text is reported" "skipped 1 JSON Lines document"
check "JSON Lines = the text files with --eot" cmp -s "$WORK/ab.bin" "$WORK/j.bin"
tok --out "$WORK/c.bin" --field content "$WORK/content.jsonl" >/dev/null
check "--field content" cmp -s "$WORK/ab.bin" "$WORK/c.bin"
gzip -k "$WORK/a.txt" "$WORK/ab.jsonl"
zstd -q -k "$WORK/b.txt"
tok --out "$WORK/z.bin" --eot "$WORK/a.txt.gz" "$WORK/b.txt.zst" >/dev/null
check ".gz and .zst = plain" cmp -s "$WORK/ab.bin" "$WORK/z.bin"
tok --out "$WORK/jz.bin" "$WORK/ab.jsonl.gz" >/dev/null
check ".jsonl.gz = plain" cmp -s "$WORK/ab.bin" "$WORK/jz.bin"
run_loom data train-tokenizer --vocab-size 280 --out "$WORK/t2.json" "$WORK/ab.jsonl.gz" "$WORK/b.txt.zst"
expect_rc "train-tokenizer on JSON Lines and compressed files" 0

# ---- shards and a manifest, read by training ---------------------------------------------------
mkdir -p "$WORK/set"
run_loom data tokenize --tokenizer "$T" --out "$WORK/set/out.bin" --shard-size 20K --eot --quiet \
  "$WORK/a.txt" "$WORK/b.txt" "$WORK/corpus.txt"
expect_rc "--shard-size" 0
expect_out "--shard-size: the manifest" "listed in the manifest $WORK/set/out.manifest.json"
tok --out "$WORK/all.bin" --eot "$WORK/a.txt" "$WORK/b.txt" "$WORK/corpus.txt" >/dev/null
check "shards: 20000 tokens each" [ "$(stat -c %s "$WORK/set/out_000000.bin")" = $((64 + 2 * 20000)) ]
check "the shards hold the single shard's stream" [ "$(for f in "$WORK"/set/out_0*.bin; do ids "$f"; done | tr '\n' ' ' | tr -s ' ' | sed 's/ $//')" = "$(ids "$WORK/all.bin")" ]
check "the manifest" python3 - "$WORK/set/out.manifest.json" <<'EOF'
import json, os, sys
m = json.load(open(sys.argv[1]))
d = os.path.dirname(sys.argv[1])
assert m["format"] == "loom-token-shards" and m["vocab_size"] == 300 and m["end_of_document"] == 299
assert m["documents"] == 3 and m["tokenizer"]["hash"].startswith("fnv1a64:")
assert m["tokens"] == sum(s["tokens"] for s in m["shards"])
assert all(os.path.getsize(os.path.join(d, s["path"])) == 64 + 2 * s["tokens"] for s in m["shards"])
EOF
TRAIN=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=32 model.heads=2
  training.seq_len=16 training.micro_batch_size=2 training.steps=3 training.log_every=1
  run.output_dir="$WORK/runs" --quiet)
for src in "one $WORK/all.bin" "manifest $WORK/set/out.manifest.json" "dir $WORK/set"; do
  set -- $src
  "$LOOM" train "${TRAIN[@]}" run.name="$1" data.train_shards="$2" >"$WORK/$1.log" 2>&1 ||
    { fail "training on $1"; tail -3 "$WORK/$1.log" >&2; }
done
check "manifest: the losses of the single shard, bit for bit" \
  [ -n "$(losses "$WORK"/runs/one_*)" ] && [ "$(losses "$WORK"/runs/one_*)" = "$(losses "$WORK"/runs/manifest_*)" ]
check "directory: the same losses" [ "$(losses "$WORK"/runs/one_*)" = "$(losses "$WORK"/runs/dir_*)" ]

# ---- progress -----------------------------------------------------------------------------------
run_loom data tokenize --tokenizer "$T" --out "$WORK/p.bin" --progress-every 0.000001 "$WORK/big.txt"
expect_err "periodic progress lines" "tokens/s, ETA"
check "progress: lines, not a refreshed line" [ "$(grep -c '^tokenize: .* of .* tokens/s' "$RUN_DIR/err")" -ge 2 ]
run_loom data tokenize --tokenizer "$T" --out "$WORK/p.bin" --quiet "$WORK/big.txt"
check "--quiet: nothing on stderr" [ ! -s "$RUN_DIR/err" ]
if script -qec true /dev/null >/dev/null 2>&1; then
  script -qec "'$LOOM' data tokenize --tokenizer '$T' --out '$WORK/p.bin' '$WORK/big.txt'" \
    /dev/null >"$WORK/tty.txt" 2>&1
  check "a terminal: one line refreshed in place" grep -q $'\r''tokenize: ' "$WORK/tty.txt"
  check "a terminal: it ends with the total time" grep -q "done in" "$WORK/tty.txt"
fi

# ---- refused ------------------------------------------------------------------------------------
cp "$WORK/ab.bin" "$WORK/keep.bin"
sha=$(sha256sum "$WORK/keep.bin")
refused() { # what, message, inputs... : tokenize to keep.bin is refused, keep.bin untouched
  local what=$1 msg=$2
  shift 2
  expect_fail "$what" "$msg" "$LOOM" data tokenize --tokenizer "$T" --out "$WORK/keep.bin" --quiet "$@"
  check "$what: the earlier output untouched" [ "$(sha256sum "$WORK/keep.bin")" = "$sha" ]
  check "$what: no temporary file left" [ -z "$(ls "$WORK" | grep -E '\.tmp\.|\.part\.')" ]
}
: >"$WORK/empty.txt"
printf ' \n\t\n  \r\n' >"$WORK/blank.txt"
printf '\n\n' >"$WORK/blank.jsonl"
printf '{"text": " "}\n{"text": ""}\n' >"$WORK/notext.jsonl"
printf '{"text": "a"}\n{"body": "b", "id": 3}\n' >"$WORK/nofield.jsonl"
printf '{"text": "a"}\n\n{"text": "b",\n' >"$WORK/badjson.jsonl"
printf '{"text": 5}\n' >"$WORK/number.jsonl"
printf '["a"]\n' >"$WORK/list.jsonl"
head -c 4000 "$WORK/a.txt.gz" >"$WORK/cut.txt.gz"
head -c 3000 "$WORK/b.txt.zst" >"$WORK/cut.txt.zst"
cp "$WORK/a.txt" "$WORK/plain.txt.gz"
python3 -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[2000:2100] = b'x' * 100; open(sys.argv[2], 'wb').write(b)" \
  "$WORK/a.txt.gz" "$WORK/garbled.txt.gz"
refused "an empty file" "$WORK/empty.txt: the file is empty" "$WORK/a.txt" "$WORK/empty.txt"
refused "whitespace only" "$WORK/blank.txt: holds only whitespace" "$WORK/blank.txt"
refused "JSON Lines of blank lines" "$WORK/blank.jsonl: holds no documents" "$WORK/blank.jsonl"
refused "JSON Lines of blank texts" "every document's 'text' is empty or blank (2 documents)" "$WORK/notext.jsonl"
refused "a line without the field" "$WORK/nofield.jsonl:2: no field 'text' (the object has 'body', 'id')" "$WORK/nofield.jsonl"
refused "a line that is not JSON" "$WORK/badjson.jsonl:3: not valid JSON" "$WORK/badjson.jsonl"
refused "a text that is a number" "$WORK/number.jsonl:1: field 'text' is a number, not a string" "$WORK/number.jsonl"
refused "a line that is a list" "$WORK/list.jsonl:1: a list, not a JSON object" "$WORK/list.jsonl"
refused "a truncated .gz" "$WORK/cut.txt.gz: corrupt gzip data (it ends in the middle of the compressed stream) after line " "$WORK/cut.txt.gz"
refused "a garbled .gz" "corrupt gzip data" "$WORK/garbled.txt.gz"
refused "a truncated .zst" "corrupt zstd data (it ends inside a frame)" "$WORK/cut.txt.zst"
refused "plain text named .gz" "$WORK/plain.txt.gz: not gzip data" "$WORK/plain.txt.gz"
refused "a missing input" "$WORK/nope.txt: cannot open" "$WORK/nope.txt"
refused "a directory" "is a directory" "$WORK/set"
expect_fail "--shard-size 0" "--shard-size must be a positive token count" \
  "$LOOM" data tokenize --tokenizer "$T" --out "$WORK/x.bin" --shard-size 0 "$WORK/a.txt"
expect_fail "--shard-size 1X" "--shard-size must be a positive token count" \
  "$LOOM" data tokenize --tokenizer "$T" --out "$WORK/x.bin" --shard-size 1X "$WORK/a.txt"
expect_fail "train-tokenizer on an empty file" "$WORK/empty.txt: the file is empty" \
  "$LOOM" data train-tokenizer --vocab-size 300 --out "$WORK/e.json" "$WORK/empty.txt"
expect_fail "train-tokenizer on whitespace" "$WORK/blank.txt: holds only whitespace" \
  "$LOOM" data train-tokenizer --vocab-size 300 --out "$WORK/e.json" "$WORK/a.txt" "$WORK/blank.txt"
check "train-tokenizer: no tokenizer written" [ ! -e "$WORK/e.json" ]

finish
