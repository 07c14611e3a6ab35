"""Minimal safetensors I/O for the Hugging Face checks, written from the format spec (not
from loom's code): read one file or a sharded directory (model.safetensors.index.json), and
write one file or shards + index. F32/F16 stored as numpy; BF16 as top halves of float32."""
import json
import os
import struct

import numpy as np

_NP = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "BF16": "<u2"}


def read_file(path):
    """name -> float32 numpy array (BF16 widened exactly); also name -> dtype string."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    out, dtypes = {}, {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        raw = np.frombuffer(buf[8 + n + b:8 + n + end], dtype=_NP[e["dtype"]])
        if e["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = raw.astype(np.float32).reshape(e["shape"])
        dtypes[name] = e["dtype"]
    return out, dtypes


def read_dir(d):
    """All tensors of an HF directory, single file or sharded (checked against the index)."""
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_file(os.path.join(d, "model.safetensors"))
    with open(index) as f:
        wm = json.load(f)["weight_map"]
    out, dtypes = {}, {}
    for shard in sorted(set(wm.values())):
        t, dt = read_file(os.path.join(d, shard))
        for k in t:
            assert wm[k] == shard, "%s found in %s, index says %s" % (k, shard, wm[k])
        out.update(t)
        dtypes.update(dt)
    assert set(out) == set(wm), "index and shards disagree"
    return out, dtypes


def bf16_bits(x):
    """float32 -> bf16 bit patterns, round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _encode(tensors, dtypes):
    header, blobs, pos = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        dt = dtypes.get(name, "F32")
        if dt == "BF16":
            data = bf16_bits(a).tobytes()
        else:
            data = np.ascontiguousarray(a, dtype=_NP[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [pos, pos + len(data)]}
        blobs.append(data)
        pos += len(data)
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(blobs)


def write_dir(d, tensors, dtypes=None, shards=1):
    """tensors: name -> array (insertion order). shards > 1: split into that many files."""
    dtypes = dtypes or {}
    os.makedirs(d, exist_ok=True)
    names = list(tensors)
    if shards == 1:
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(_encode(tensors, dtypes))
        return
    wm, per = {}, -(-len(names) // shards)
    size = {"F32": 4, "F16": 2, "BF16": 2}
    total = sum(tensors[k].size * size[dtypes.get(k, "F32")] for k in names)
    for s in range(shards):
        fn = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = {k: tensors[k] for k in names[s * per:(s + 1) * per]}
        with open(os.path.join(d, fn), "wb") as f:
            f.write(_encode(part, dtypes))
        wm.update({k: fn for k in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": int(total)}, "weight_map": wm}, f)
