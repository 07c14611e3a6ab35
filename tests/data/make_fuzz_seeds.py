#!/usr/bin/env python3
"""Writes the seed corpora of the data-file fuzz harnesses (tests/fuzz/corpus/<target>/):
small valid inputs of each format, made the way the tests make theirs (loom's own writers
where it has one, Python for the rest). Run from the repository root with the build's loom:
    /usr/bin/python3 tests/data/make_fuzz_seeds.py build/loom
Needs python3-pil. The seeds are committed; re-running rewrites them (JPEG bytes depend on
the PIL/libjpeg version, everything else is deterministic)."""
import io, json, os, struct, subprocess, sys, tempfile

from PIL import Image

loom = os.path.abspath(sys.argv[1])
out = "tests/fuzz/corpus"
tmp = tempfile.mkdtemp(prefix="loom-seeds.")
QWEN2 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
         "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def put(target, name, data):
    os.makedirs(f"{out}/{target}", exist_ok=True)
    with open(f"{out}/{target}/{name}", "wb") as f:
        f.write(data)


def run(*args):
    subprocess.run([loom, *args], check=True, stdout=subprocess.DEVNULL)


# ---- tokenizer: tokenizer.json NUL text -------------------------------------------------
text = open("tests/data/corpus_varied.txt", "rb").read()[:2000]
with open(f"{tmp}/corpus.txt", "wb") as f:
    f.write(text)
run("data", "train-tokenizer", "--vocab-size", "300", "--out", f"{tmp}/tok.json", f"{tmp}/corpus.txt")
gpt2 = json.load(open(f"{tmp}/tok.json"))
qwen = json.loads(json.dumps(gpt2))  # merges as pairs, as loom writes them
sample = "Hello world, it's 2024!\n\n  \u00a0tabs\tand \u180espaces \u3000end <|endoftext|> x'S".encode()
put("tokenizer", "gpt2-style-300.bin", json.dumps(gpt2).encode() + b"\0" + sample)
qwen["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": QWEN2}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
gpt2["model"]["merges"] = [" ".join(m) for m in gpt2["model"]["merges"]]  # "a b" string form
qwen["added_tokens"].append({"id": 300, "content": "<|im_start|>", "single_word": False,
                             "lstrip": False, "rstrip": False, "normalized": False, "special": True})
put("tokenizer", "qwen2-style-split.bin", json.dumps(qwen).encode() + b"\0" + sample + b"<|im_start|>\xff\xfe")
put("tokenizer", "gpt2-style-whole-input.json", json.dumps(gpt2).encode())

# ---- shard: loom data tokenize, and uint32 shards written here ---------------------------
run("data", "tokenize", "--tokenizer", f"{tmp}/tok.json", "--out", f"{tmp}/s.bin", f"{tmp}/corpus.txt")
def shard(dtype, vocab, toks):
    w = 2 if dtype == 1 else 4
    h = b"LOOMTOK1" + struct.pack("<IIQI", 1, dtype, len(toks), vocab) + bytes(36)
    return h + b"".join(t.to_bytes(w, "little") for t in toks)
put("shard", "tokenize-u16.bin", shard(1, 300, list(struct.unpack("<200H", open(f"{tmp}/s.bin", "rb").read()[64:464]))))
put("shard", "u32-vocab-100000.bin", shard(2, 100000, [0, 99999, 65536, 5, 70000, 1, 2, 3, 4, 99998, 7, 8]))
put("shard", "u16-vocab-65536-max.bin", shard(1, 65536, [65535, 0, 1, 65534, 2, 3, 4, 5, 6]))
put("shard", "empty.bin", shard(1, 10, []))
def shard_v2(dtype, vocab, eod, toks):  # version 2: the end-of-document token at offset 28
    w = 2 if dtype == 1 else 4
    h = b"LOOMTOK1" + struct.pack("<IIQII", 2, dtype, len(toks), vocab, eod) + bytes(32)
    return h + b"".join(t.to_bytes(w, "little") for t in toks)
put("shard", "v2-eod-u16.bin", shard_v2(1, 300, 299, [5, 6, 299, 7, 8, 9, 299, 10, 299, 299, 11, 12]))

# ---- safetensors ---------------------------------------------------------------------------
def st(tensors, meta=None):
    hdr, data = {}, b""
    for name, dt, shape, raw in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta is not None:
        hdr["__metadata__"] = meta
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data
f32 = struct.pack("<6f", 1, -2, 3.5, float("inf"), 0, -0.0)
put("safetensors", "f32-bf16-f16-i64.safetensors", st([
    ("w", "F32", [2, 3], f32), ("b", "BF16", [3], bytes.fromhex("803fc0bf007f")),
    ("h", "F16", [2], bytes.fromhex("003c00fc")), ("step", "I64", [], struct.pack("<q", 7))],
    {"format": "pt", "loom.step": "7"}))
put("safetensors", "empty-and-zero-dim.safetensors", st([("z", "F32", [0, 4], b""), ("u", "U8", [3], b"abc"),
                                                         ("bool", "BOOL", [2], b"\x00\x01")]))
put("safetensors", "no-tensors.safetensors", st([], {}))
put("safetensors", "f64-i32-i8-u16.safetensors", st([
    ("d", "F64", [2], struct.pack("<2d", 1e300, -1e-300)), ("i", "I32", [1, 1], struct.pack("<i", -5)),
    ("c", "I8", [2], b"\x80\x7f"), ("u16", "U16", [1], b"\xff\xff")]))

# ---- jpeg -------------------------------------------------------------------------------------
def jpg(im, **kw):
    b = io.BytesIO()
    im.save(b, "JPEG", **kw)
    return b.getvalue()
grad = Image.new("RGB", (60, 40))
grad.putdata([(x * 4, y * 6, (x + y) * 2) for y in range(40) for x in range(60)])
put("jpeg", "rgb-60x40-q75.jpg", jpg(grad, quality=75))
put("jpeg", "rgb-60x40-progressive.jpg", jpg(grad, quality=60, progressive=True))
put("jpeg", "grey-28x28.jpg", jpg(Image.new("L", (28, 28), 100), quality=90))
put("jpeg", "rgb-30x200-444.jpg", jpg(Image.new("RGB", (30, 200), (10, 200, 30)), quality=50, subsampling=0))
put("jpeg", "cmyk-16x16.jpg", jpg(Image.new("CMYK", (16, 16), (0, 50, 100, 0)), quality=80))

# ---- llava: mode byte (even .json, odd .jsonl) then the file -------------------------------------
conv = [{"from": "human", "value": "<image>\nWhat colour?"}, {"from": "gpt", "value": "red"}]
anno = [{"id": "a", "image": "img.jpg", "conversations": conv},
        {"id": 2, "image": ["img.jpg", "img.jpg"], "conversations": conv + conv},
        {"id": "text-only", "conversations": [{"from": "system", "value": "s"}] + conv},
        {"id": "missing", "image": "nope.jpg", "conversations": conv},
        {"id": "bad-role", "conversations": [{"from": "robot", "value": "x"}]}]
put("llava", "list.json.bin", b"\0" + json.dumps(anno).encode())
put("llava", "lines.jsonl.bin", b"\1" + b"\n".join(json.dumps(a).encode() for a in anno) + b"\n{not json\n\n")

# ---- energon: index.json, dataset.yaml, split.yaml, shard, separated by "\n@@@@\n" --------------
run("data", "synth-vqa", "--out", f"{tmp}/vqa", "--samples", "2", "--shard-size", "2",
    "--image-size", "28", "--split", "1,0,0")
parts = [open(f"{tmp}/vqa/{p}", "rb").read() for p in
         (".nv-meta/index.json", ".nv-meta/dataset.yaml", ".nv-meta/split.yaml", "000000.tar")]
put("energon", "synth-vqa-2-samples.bin", b"\n@@@@\n".join(parts))
