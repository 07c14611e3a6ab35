"""Strict safetensors reader/writer (numpy only; no `safetensors` package needed).

Format: 8-byte little-endian u64 N, then N bytes of UTF-8 JSON header
  {"__metadata__": {str: str}, name: {"dtype": D, "shape": [...], "data_offsets": [b, e]}, ...}
then the data section; offsets are relative to the start of the data section.

The reader is deliberately strict, because it checks a file written by a C program:
  - header length within the file, header valid UTF-8 JSON object, no duplicate keys;
  - __metadata__ (optional) maps str -> str;
  - every tensor entry has exactly the keys dtype/shape/data_offsets, a known dtype,
    a shape of non-negative ints, 0 <= b <= e, e - b == numel * itemsize;
  - the tensors, sorted by offset, tile the data section exactly: the first starts at 0,
    each starts where the previous ended, the last ends at the end of the file
    (no gaps, no overlaps, no trailing bytes).
"""
import json
import struct

import numpy as np

# dtype name -> (numpy dtype as stored, itemsize)
_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # converted to float32 on read
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_NP_TO_ST = {
    np.dtype("float64"): "F64",
    np.dtype("float32"): "F32",
    np.dtype("float16"): "F16",
    np.dtype("int64"): "I64",
    np.dtype("int32"): "I32",
    np.dtype("int16"): "I16",
    np.dtype("int8"): "I8",
    np.dtype("uint8"): "U8",
    np.dtype("bool"): "BOOL",
}

MAX_HEADER = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    pass


def bf16_bits_to_f32(u16):
    """uint16 bf16 bit patterns -> float32 (exact: bf16 is the top half of an f32)."""
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> uint16 bf16 bit patterns, round to nearest even (NaN kept quiet)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    out = rounded.astype(np.uint16)
    out[nan] = ((b[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def _no_dup_pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise SafetensorsError("duplicate key in header: %r" % k)
        d[k] = v
    return d


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def parse(buf):
    """Parse safetensors bytes. Returns (tensors: dict name -> np.ndarray, metadata: dict)."""
    buf = memoryview(buf)
    size = len(buf)
    if size < 8:
        raise SafetensorsError("file too short (%d bytes) for the 8-byte header size" % size)
    (n,) = struct.unpack("<Q", bytes(buf[:8]))
    if n > MAX_HEADER:
        raise SafetensorsError("header size %d exceeds %d" % (n, MAX_HEADER))
    if 8 + n > size:
        raise SafetensorsError("header size %d runs past the end of the file (%d bytes)" % (n, size))
    try:
        text = bytes(buf[8:8 + n]).decode("utf-8")
    except UnicodeDecodeError as e:
        raise SafetensorsError("header is not UTF-8: %s" % e)
    if not text.lstrip().startswith("{"):
        raise SafetensorsError("header does not start with a JSON object")
    try:
        header = json.loads(text, object_pairs_hook=_no_dup_pairs)
    except json.JSONDecodeError as e:
        raise SafetensorsError("header is not valid JSON: %s" % e)
    if not isinstance(header, dict):
        raise SafetensorsError("header is not a JSON object")

    metadata = {}
    if "__metadata__" in header:
        md = header.pop("__metadata__")
        if not isinstance(md, dict):
            raise SafetensorsError("__metadata__ is not an object")
        for k, v in md.items():
            if not isinstance(v, str):
                raise SafetensorsError("__metadata__[%r] is %s, not a string" % (k, type(v).__name__))
        metadata = md

    data_start = 8 + n
    data_len = size - data_start
    entries = []
    for name, info in header.items():
        if not isinstance(info, dict):
            raise SafetensorsError("%s: entry is not an object" % name)
        if set(info.keys()) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError("%s: keys %s, expected dtype, shape, data_offsets"
                                   % (name, sorted(info.keys())))
        dt = info["dtype"]
        if dt not in _DTYPES:
            raise SafetensorsError("%s: unknown dtype %r" % (name, dt))
        shape = info["shape"]
        if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
            raise SafetensorsError("%s: bad shape %r" % (name, shape))
        offs = info["data_offsets"]
        if (not isinstance(offs, list) or len(offs) != 2 or not all(_is_int(o) for o in offs)):
            raise SafetensorsError("%s: bad data_offsets %r" % (name, offs))
        b, e = offs
        if not (0 <= b <= e <= data_len):
            raise SafetensorsError("%s: data_offsets [%d, %d] outside data section of %d bytes"
                                   % (name, b, e, data_len))
        numel = 1
        for s in shape:
            numel *= s
        want = numel * _DTYPES[dt].itemsize
        if e - b != want:
            raise SafetensorsError("%s: %d bytes for dtype %s shape %s, need %d"
                                   % (name, e - b, dt, shape, want))
        entries.append((b, e, name, dt, shape))

    entries.sort(key=lambda t: (t[0], t[1]))
    pos = 0
    for b, e, name, _, _ in entries:
        if b != pos:
            raise SafetensorsError("%s: starts at %d, expected %d (%s)"
                                   % (name, b, pos, "gap" if b > pos else "overlap"))
        pos = e
    if pos != data_len:
        raise SafetensorsError("tensors end at byte %d of a %d-byte data section" % (pos, data_len))

    tensors = {}
    for b, e, name, dt, shape in entries:
        raw = np.frombuffer(buf[data_start + b:data_start + e], dtype=_DTYPES[dt]).copy()
        if dt == "BF16":
            raw = bf16_bits_to_f32(raw)
        tensors[name] = raw.reshape(shape)
    return tensors, metadata


def read(path):
    with open(path, "rb") as f:
        return parse(f.read())


def read_dtypes(path):
    """name -> dtype string as stored in the header (for checking what a writer chose)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    header.pop("__metadata__", None)
    return {k: v["dtype"] for k, v in header.items()}


def dumps(tensors, metadata=None, dtypes=None):
    """Serialise tensors (name -> np array, insertion order kept) to bytes.
    dtypes: optional name -> "BF16" to store a uint16 array of bf16 bits as BF16."""
    dtypes = dtypes or {}
    header = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise SafetensorsError("metadata must map str -> str (%r: %r)" % (k, v))
        header["__metadata__"] = dict(metadata)
    blobs = []
    pos = 0
    for name, arr in tensors.items():
        if name == "__metadata__":
            raise SafetensorsError("tensor name __metadata__ is reserved")
        arr = np.asarray(arr)
        if dtypes.get(name) == "BF16":
            if arr.dtype != np.uint16:
                raise SafetensorsError("%s: BF16 needs uint16 bits" % name)
            dt = "BF16"
        else:
            if arr.dtype not in _NP_TO_ST:
                raise SafetensorsError("%s: unsupported dtype %s" % (name, arr.dtype))
            dt = _NP_TO_ST[arr.dtype]
        data = np.ascontiguousarray(arr, dtype=_DTYPES[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": [int(s) for s in arr.shape],
                        "data_offsets": [pos, pos + len(data)]}
        blobs.append(data)
        pos += len(data)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((-len(hb)) % 8)  # pad so the data section is 8-byte aligned
    return struct.pack("<Q", len(hb)) + hb + b"".join(blobs)


def write(path, tensors, metadata=None, dtypes=None):
    with open(path, "wb") as f:
        f.write(dumps(tensors, metadata, dtypes))
