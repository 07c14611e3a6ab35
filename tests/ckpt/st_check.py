#!/usr/bin/env python3
"""Independent check of loom's safetensors reader/writer (numpy + torch, no shared code).

A strict safetensors reader and a writer are implemented here from the format spec. Then:
  1. loom writes a fixture (st_helper write); the strict reader validates it and compares
     every value with the formulas it was written from, and BF16 rounding with torch's.
  2. Python writes a file (keys out of offset order, __metadata__ last, BF16 via torch and via
     bit manipulation, F64/I64 extremes); `loom ckpt inspect --json` must report the same
     dtypes/shapes/norms/min/max; st_helper copy (loom read + loom write) must reproduce the
     bytes; st_helper read-f32 must convert BF16/F16/F64 exactly as numpy/torch do.
  3. Corrupted variants are rejected by both readers; loom exits 1 naming the file.
  4. A checkpoint directory (two files + trainer_state.json) is inspected as a whole: the
     model file's tensors as parameters, the optimizer file's apart.
usage: st_check.py LOOM_BIN ST_HELPER_BIN
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

NP = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "BF16": "<u2", "I32": "<i4", "I64": "<i8",
      "U8": "u1", "I8": "i1", "U16": "<u2", "BOOL": "u1"}
SIZE = {k: np.dtype(v).itemsize for k, v in NP.items()}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


# ---- strict reader (from the spec) --------------------------------------------------------
class BadFile(Exception):
    pass


def _no_dup_pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise BadFile(f"duplicate key {k!r}")
        d[k] = v
    return d


def _is_uint(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def read_st(path):
    """Returns (header_len, key order, metadata, {name: (dtype, shape, raw bytes)}, offsets)."""
    data = open(path, "rb").read()
    if len(data) < 8:
        raise BadFile("shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise BadFile("header length past end of file")
    text = data[8:8 + n].decode("utf-8")
    if not text.startswith("{"):
        raise BadFile("header does not start with {")
    hdr = json.loads(text, object_pairs_hook=_no_dup_pairs)
    keys = list(hdr.keys())
    meta = hdr.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise BadFile("bad __metadata__")
    buf = data[8 + n:]
    tensors, spans = {}, []
    for name, e in hdr.items():
        if not isinstance(e, dict) or not {"dtype", "shape", "data_offsets"} <= e.keys():
            raise BadFile(f"{name}: incomplete entry")
        dt, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if dt not in NP:
            raise BadFile(f"{name}: dtype {dt}")
        if not isinstance(shape, list) or not all(_is_uint(s) for s in shape):
            raise BadFile(f"{name}: shape")
        if not (isinstance(offs, list) and len(offs) == 2 and all(_is_uint(o) for o in offs)):
            raise BadFile(f"{name}: offsets")
        b, e_ = offs
        if e_ - b != math.prod(shape) * SIZE[dt]:
            raise BadFile(f"{name}: size mismatch")
        spans.append((b, e_, name))
        tensors[name] = (dt, tuple(shape), buf[b:e_])
    pos = 0
    for b, e_, name in sorted(spans):
        if b != pos:
            raise BadFile(f"{name}: gap or overlap")
        pos = e_
    if pos != len(buf):
        raise BadFile("data section length mismatch")
    if any(t[0] == "BOOL" and any(x > 1 for x in t[2]) for t in tensors.values()):
        raise BadFile("BOOL value not 0/1")
    return n, keys, meta, tensors, {name: (b, e_) for b, e_, name in spans}


def as_array(dt, shape, raw):
    a = np.frombuffer(raw, dtype=NP[dt]).reshape(shape)
    return a.astype(bool) if dt == "BOOL" else a


def bf16_bits_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def to_f64(dt, shape, raw):
    a = as_array(dt, shape, raw)
    return bf16_bits_to_f32(a).astype(np.float64) if dt == "BF16" else a.astype(np.float64)


# ---- writer (from the spec) ---------------------------------------------------------------
def write_st(path, tensors, metadata, gap_before_last=0, header_len_delta=0, truncate=0):
    """tensors: list of (name, dtype, shape, raw bytes), laid out in list order. The JSON lists
    them in reverse order with __metadata__ last (both allowed by the spec)."""
    hdr, pos, body = {}, 0, b""
    for i, (name, dt, shape, raw) in enumerate(tensors):
        assert len(raw) == math.prod(shape) * SIZE[dt]
        if i == len(tensors) - 1 and gap_before_last:
            body += b"\0" * gap_before_last
            pos += gap_before_last
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [pos, pos + len(raw)]}
        body += raw
        pos += len(raw)
    ordered = {k: hdr[k] for k in reversed(list(hdr))}
    ordered["__metadata__"] = metadata
    text = json.dumps(ordered, ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    blob = struct.pack("<Q", len(text) + header_len_delta) + text + body
    with open(path, "wb") as f:
        f.write(blob[:len(blob) - truncate])


# ---- helpers ------------------------------------------------------------------------------
def run(args):
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def stats64(x):
    """What loom reports: l2 over everything, min/max over non-NaN, count of NaN/inf."""
    x = x.astype(np.float64).ravel()
    with np.errstate(over="ignore", invalid="ignore"):
        l2 = float(np.sqrt(np.sum(x * x)))
    ok = x[~np.isnan(x)]
    lo = float(ok.min()) if ok.size else None
    hi = float(ok.max()) if ok.size else None
    fin = lambda v: v if v is not None and math.isfinite(v) else None
    return {"l2": fin(l2), "min": fin(lo), "max": fin(hi), "nonfinite": int((~np.isfinite(x)).sum())}


def close(a, b, rtol=1e-12):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= rtol * max(1.0, abs(b))


def check_loom_layout(path, label):
    """Properties of files loom writes: padded header, JSON order = data order, metadata first."""
    n, keys, meta, tensors, offs = read_st(path)
    check(n % 8 == 0, f"{label}: header length {n} not a multiple of 8")
    raw = open(path, "rb").read()[8:8 + n]
    check(raw.rstrip(b" ").endswith(b"}"), f"{label}: header padding is not spaces")
    names = [k for k in keys if k != "__metadata__"]
    check(names == sorted(names, key=lambda k: offs[k]), f"{label}: JSON order != data order")
    check(not meta or keys[0] == "__metadata__", f"{label}: __metadata__ not first")
    return n, keys, meta, tensors


# ---- 1. loom writes, Python reads -----------------------------------------------------------
BF16_SRC = [1.0, 1.00390625, 1.01171875, -1.00390625, 3.14159265, -2.5e-3, 1e-40, -1e-45,
            3.3895314e38, 3.4028235e38, 0.0, -0.0, math.inf, -math.inf, 65504.0, 1.0e-8,
            123456.789, -7.0e20, 0.1, math.nan]
F16_BITS = [0x0000, 0x8000, 0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x7C00, 0xFC00, 0x3555]


def check_fixture(helper, loom, tmp):
    path = os.path.join(tmp, "fixture.safetensors")
    r = run([helper, "write", path])
    check(r.returncode == 0, f"st_helper write failed: {r.stderr}")
    _, keys, meta, t = check_loom_layout(path, "fixture")
    check(meta == {"format": "pt", "loom.note": "h\u00e9llo \u2713"}, f"fixture metadata {meta}")
    want = {
        "f32": ("F32", (3, 4), ((np.arange(12) - 5) * 0.375).astype("<f4").reshape(3, 4)),
        "f64": ("F64", (5,), np.arange(1, 6) / 3.0),
        "f16": ("F16", (11,), np.array(F16_BITS, dtype="<u2").view("<f2")),
        "i32": ("I32", (2, 3), np.array([-2**31, -1, 0, 1, 2**31 - 1, 123456]).reshape(2, 3)),
        "i64": ("I64", (6,), np.array([-2**63, -1, 0, 1, 2**63 - 1, 2**53 + 1], dtype=np.int64)),
        "u8": ("U8", (10,), np.arange(10) * 37 % 256),
        "i8": ("I8", (5,), np.array([-128, -1, 0, 1, 127])),
        "u16": ("U16", (5,), np.array([0, 1, 65535, 32768, 12345])),
        "bool": ("BOOL", (5,), np.array([True, False, False, True, True])),
        "scalar": ("F32", (), np.float32(42.5)),
        "empty": ("F32", (0,), np.zeros(0)),
        "empty2d": ("I64", (3, 0), np.zeros((3, 0))),
    }
    order = ["f32", "f64", "bf16_src", "bf16", "f16", "i32", "i64", "u8", "i8", "u16", "bool",
             "scalar", "empty", "empty2d"]
    check([k for k in keys if k != "__metadata__"] == order, f"fixture order {keys}")
    for name, (dt, shape, values) in want.items():
        got = t.get(name)
        check(got is not None and got[0] == dt and got[1] == shape, f"fixture {name}: {got and got[:2]}")
        if got:
            a = as_array(*got)
            if dt == "F16":  # compare bits (NaN-safe, signed zero)
                check(a.view("<u2").tolist() == F16_BITS, f"fixture f16 bits {a.view('<u2')}")
            else:
                check(np.array_equal(a, np.asarray(values).astype(a.dtype)), f"fixture {name}: {a}")
    src = as_array(*t["bf16_src"])
    ref = np.array(BF16_SRC, dtype=np.float32)
    check(np.allclose(src, ref, rtol=1e-7, atol=0, equal_nan=True), f"bf16_src {src}")
    bits = as_array(*t["bf16"])
    torch_bits = torch.from_numpy(src.copy()).to(torch.bfloat16).view(torch.int16).numpy().view("<u2")
    nan = np.isnan(src)
    check(np.array_equal(bits[~nan], torch_bits[~nan]),
          f"BF16 rounding differs from torch: loom {bits[~nan]} torch {torch_bits[~nan]}")
    check(np.isnan(bf16_bits_to_f32(bits[nan])).all(), "BF16 NaN not preserved")
    # loom's own statistics of its fixture, checked against numpy
    check_inspect(loom, path, {n: (g[0], g[1], to_f64(*g)) for n, g in t.items()}, order, meta)


# ---- 2. Python writes, loom reads -----------------------------------------------------------
def python_tensors():
    rng = np.random.default_rng(1234)
    g = torch.Generator().manual_seed(7)
    bf = torch.randn(4, 8, generator=g).to(torch.bfloat16)
    f32_for_bits = rng.standard_normal(10).astype(np.float32)
    u = f32_for_bits.view(np.uint32).astype(np.uint64)
    manual_bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")  # RNE, no NaN inputs
    torch_bits = torch.from_numpy(f32_for_bits).to(torch.bfloat16).view(torch.int16).numpy().view("<u2")
    check(np.array_equal(manual_bits, torch_bits), "python: manual BF16 != torch BF16")
    arrays = [
        ("w.f32", "F32", rng.standard_normal((16, 8)).astype("<f4")),
        ("w.f64", "F64", rng.standard_normal(7) * 1e3),
        ("w.bf16", "BF16", bf.view(torch.int16).numpy().view("<u2")),
        ("w.bf16.bits", "BF16", manual_bits),
        ("w.f16", "F16", np.array([0, -0.0, 1, -2, 65504, 6e-8, 6.1e-5, 0.333, 1e-7], "<f2")),
        ("i64", "I64", np.array([-2**63, 2**63 - 1, 0, 5, -7], dtype="<i8")),
        ("i32", "I32", np.array([[-2**31, 2**31 - 1], [3, -4]], dtype="<i4")),
        ("u8", "U8", np.array([0, 255, 7], dtype="u1")),
        ("i8", "I8", np.array([-128, 127, -1], dtype="i1")),
        ("u16", "U16", np.array([65535, 0, 300], dtype="<u2")),
        ("bool", "BOOL", np.array([1, 0, 1, 1], dtype="u1")),
        ("scalar", "F64", np.array(2.5, dtype="<f8")),
        ("empty", "F16", np.zeros((0, 4), dtype="<f2")),
        ("nonfinite", "F32", np.array([np.nan, np.inf, 1.0, -2.0], dtype="<f4")),
    ]
    return [(n, dt, a.shape, np.ascontiguousarray(a).tobytes()) for n, dt, a in arrays]


def check_inspect(loom, path, expect, order, meta):
    """expect: {name: (dtype, shape, float64 values)}; order: names in data order."""
    r = run([loom, "ckpt", "inspect", "--json", path])
    check(r.returncode == 0, f"inspect --json {path}: rc {r.returncode} {r.stderr}")
    if r.returncode:
        return
    doc = json.loads(r.stdout)
    f = doc["files"][0]
    check([t["name"] for t in f["tensors"]] == order, f"inspect order {[t['name'] for t in f['tensors']]}")
    check(f["metadata"] == meta, f"inspect metadata {f['metadata']}")
    nbytes = 0
    for t in f["tensors"]:
        dt, shape, x = expect[t["name"]]
        nbytes += math.prod(shape) * SIZE[dt]
        check(t["dtype"] == dt and tuple(t["shape"]) == tuple(shape), f"inspect {t['name']} {t}")
        check(t["numel"] == x.size and t["nbytes"] == x.size * SIZE[dt], f"inspect size {t}")
        s = stats64(x)
        for k in ("l2", "min", "max"):
            check(close(t[k], s[k]), f"inspect {t['name']} {k}: loom {t[k]} numpy {s[k]}")
        check(t["nonfinite"] == s["nonfinite"], f"inspect {t['name']} nonfinite {t['nonfinite']}")
    check(doc["tensor_count"] == len(order) and doc["bytes"] == nbytes and
          doc["param_count"] == sum(v[2].size for v in expect.values()), f"inspect totals {doc}")
    r = run([loom, "ckpt", "inspect", path])
    check(r.returncode == 0 and all(n in r.stdout for n in order), f"inspect text: {r.stdout}")


def check_python_file(loom, helper, tmp):
    tensors = python_tensors()
    meta = {"format": "np", "step": "12", "unicode": "\u00fc"}
    path = os.path.join(tmp, "py.safetensors")
    write_st(path, tensors, meta)
    _, _, m, t, _ = read_st(path)  # the strict reader accepts what the writer made
    check(m == meta and len(t) == len(tensors), "python self-check")
    expect = {n: (dt, shape, to_f64(dt, shape, raw)) for n, dt, shape, raw in tensors}
    check_inspect(loom, path, expect, [n for n, *_ in tensors], meta)
    # loom read + loom write must reproduce every tensor's bytes and the metadata
    copy = os.path.join(tmp, "copy.safetensors")
    r = run([helper, "copy", path, copy])
    check(r.returncode == 0, f"st_helper copy: {r.stderr}")
    if r.returncode == 0:
        _, keys, m2, t2 = check_loom_layout(copy, "copy")
        check(m2 == meta, f"copy metadata {m2}")
        check([k for k in keys if k != "__metadata__"] == [n for n, *_ in tensors], f"copy order {keys}")
        for n, dt, shape, raw in tensors:
            check(t2.get(n) == (dt, tuple(shape), raw), f"copy of {n} differs")
    # loom_st_read_f32 conversions, exactly as numpy/torch convert
    for name, dt, shape, raw in tensors:
        if dt not in ("F32", "F64", "F16", "BF16"):
            continue
        out = os.path.join(tmp, name + ".f32")
        r = run([helper, "read-f32", path, name, out])
        check(r.returncode == 0, f"read-f32 {name}: {r.stderr}")
        if r.returncode:
            continue
        got = np.fromfile(out, dtype="<f4")
        if dt == "BF16":
            want = torch.from_numpy(as_array(dt, shape, raw).view(np.int16).copy()).view(
                torch.bfloat16).to(torch.float32).numpy().ravel()
        else:
            want = as_array(dt, shape, raw).astype(np.float32).ravel()
        check(np.array_equal(got.view("<u4"), want.view("<u4")), f"read-f32 {name}: {got} vs {want}")
    return tensors, meta


# ---- 3. corrupt files -----------------------------------------------------------------------
def check_corrupt(loom, tmp, tensors, meta):
    cases = {
        "truncated": (dict(truncate=3), "nonfinite"),
        "gap": (dict(gap_before_last=4), "gap"),
        "hdrlen": (dict(header_len_delta=100000), "header length"),
    }
    for label, (kw, needle) in cases.items():
        path = os.path.join(tmp, f"corrupt_{label}.safetensors")
        write_st(path, tensors, meta, **kw)
        try:
            read_st(path)
            check(False, f"python reader accepted corrupt file {label}")
        except (BadFile, ValueError):
            pass
        r = run([loom, "ckpt", "inspect", path])
        check(r.returncode == 1, f"inspect {label}: rc {r.returncode}")
        check(os.path.basename(path) in r.stderr and needle in r.stderr,
              f"inspect {label}: stderr {r.stderr!r}")


# ---- 4. checkpoint directory ----------------------------------------------------------------
def check_directory(loom, tmp, tensors, meta):
    d = os.path.join(tmp, "checkpoint_00000012")
    os.mkdir(d)
    write_st(os.path.join(d, "model.safetensors"), tensors[:3], {"format": "pt"})
    write_st(os.path.join(d, "optimizer.safetensors"), tensors[3:], meta)
    state = {"step": 12, "loss": 2.25, "rng": [1, 2, 3, 4]}
    with open(os.path.join(d, "trainer_state.json"), "w") as f:
        json.dump(state, f)
    r = run([loom, "ckpt", "inspect", "--json", d])
    check(r.returncode == 0, f"inspect dir: {r.stderr}")
    if r.returncode == 0:
        doc = json.loads(r.stdout)
        check([os.path.basename(f["path"]) for f in doc["files"]] ==
              ["model.safetensors", "optimizer.safetensors"], "dir file list")
        # model.safetensors holds parameters; optimizer.safetensors (entries that are not
        # AdamW moments here) is optimizer state, counted apart
        other = doc["optimizer"].get("optimizer_other", {})
        check(doc["tensor_count"] == 3 and other.get("tensor_count") == len(tensors) - 3,
              f"dir tensor counts {doc['tensor_count']} {other.get('tensor_count')}")
        check([t["name"] for t in other.get("tensors", [])] == [n for n, *_ in tensors[3:]],
              "dir optimizer tensor names")
        check(doc["bytes"] == sum(len(raw) for *_, raw in tensors), "dir bytes")
        check(doc.get("trainer_state") == state, f"trainer_state {doc.get('trainer_state')}")
    r = run([loom, "ckpt", "inspect", d])
    check(r.returncode == 0 and "trainer_state.json" in r.stdout and "all files" in r.stdout,
          f"inspect dir text: {r.stdout}")


def main():
    loom, helper = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="loom_st_check_") as tmp:
        check_fixture(helper, loom, tmp)
        tensors, meta = check_python_file(loom, helper, tmp)
        check_corrupt(loom, tmp, tensors, meta)
        check_directory(loom, tmp, tensors, meta)
    print(f"st_check.py: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
