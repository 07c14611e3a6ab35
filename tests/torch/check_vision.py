#!/usr/bin/python3
"""Check loom's vision encoder (Qwen2.5-VL ViT or LLaVA-style ViT) against an independent
PyTorch implementation, written from the Qwen2.5-VL / LLaVA algorithms (window order of merged
units, per-window and per-image attention, 2D rotary positions with height then width
frequencies, RMSNorm, SwiGLU with biases, the 2x2 patch merger with an erf GELU; or learned
positions, LayerNorm, GELU MLP, post-norm and a Linear-GELU-Linear projector).

usage: check_vision.py DUMP.safetensors   (written by loom_vision_dump)

Tolerances (relative norm error against float64): fp32 1e-5 for the output and 1e-4 for every
gradient — the same justification as the text model (tests/torch/check_refdump.py): fp32
reductions of length <= a few hundred through a few blocks stay near 1e-6. bf16: loom rounds
every linear layer's inputs to bf16 exactly as BF16Linear does here; two faithful
implementations then differ only where fp32 noise flips a rounding: 1e-2.
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402
from ref_model import linear, rms_norm, rotate_half  # noqa: E402

torch.set_num_threads(1)


def window_index(grids, window, patch, merge):
    """merged-unit order of window attention and the window boundaries in patches"""
    ws = window // merge // patch
    order, cu, offset = [], [0], 0
    for t, h, w in grids:
        lh, lw = h // merge, w // merge
        idx = np.arange(t * lh * lw).reshape(t, lh, lw)
        nwh, nww = -(-lh // ws), -(-lw // ws)
        padded = np.full((t, nwh * ws, nww * ws), -1)
        padded[:, :lh, :lw] = idx
        padded = padded.reshape(t, nwh, ws, nww, ws).transpose(0, 1, 3, 2, 4).reshape(t, nwh * nww, ws * ws)
        for tt in range(t):
            for win in padded[tt]:
                keep = win[win >= 0]
                if len(keep):
                    order.extend((keep + offset).tolist())
                    cu.append(cu[-1] + len(keep) * merge * merge)
        offset += t * lh * lw
    return np.array(order), cu


def rot_table(grids, D, theta, merge):
    """(P, D/2) angles: first D/4 frequencies by patch row, the next D/4 by patch column"""
    dim = D // 2
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    rows = []
    for t, h, w in grids:
        hp = torch.arange(h)[:, None].expand(h, w).reshape(h // merge, merge, w // merge, merge)
        wp = torch.arange(w)[None, :].expand(h, w).reshape(h // merge, merge, w // merge, merge)
        hp = hp.permute(0, 2, 1, 3).flatten()
        wp = wp.permute(0, 2, 1, 3).flatten()
        pos = torch.stack([hp, wp], -1).repeat(t, 1)
        rows.append(torch.cat([pos[:, :1].double() * inv, pos[:, 1:].double() * inv], -1))
    return torch.cat(rows, 0)


def seg_attention(q, k, v, cu):
    out = torch.empty_like(q)
    D = q.shape[-1]
    for a, b in zip(cu[:-1], cu[1:]):
        qs, ks, vs = (x[a:b].transpose(0, 1) for x in (q, k, v))  # (H, n, D)
        p = torch.softmax(qs @ ks.transpose(1, 2) / math.sqrt(D), -1)
        out[a:b] = (p @ vs).transpose(0, 1)
    return out


def layer_norm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def qwen_forward(P, pixels, grids, cfg, bf16):
    H, depth, merge, D = cfg["heads"], cfg["depth"], cfg["merge"], cfg["hidden"] // cfg["heads"]
    x = linear(pixels, P["vision.patch_embed.weight"], None, bf16)
    order, cu_win = window_index(grids, cfg["window"], cfg["patch"], merge)
    unit = merge * merge
    Pn, C = x.shape
    x = x.reshape(Pn // unit, unit, C)[order].reshape(Pn, C)
    ang = rot_table(grids, D, 10000.0, merge)
    ang = ang.reshape(Pn // unit, unit, -1)[order].reshape(Pn, -1)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos()[:, None, :].to(x.dtype), emb.sin()[:, None, :].to(x.dtype)
    cu_full = [0]
    for t, h, w in grids:
        for _ in range(t):
            cu_full.append(cu_full[-1] + h * w)
    for l in range(depth):
        pre = "vision.blocks.%d." % l
        h = rms_norm(x, P[pre + "attn_norm.weight"], 1e-6)
        q, k, v = (linear(h, P[pre + "attn.%s.weight" % n], P[pre + "attn.%s.bias" % n], bf16).reshape(Pn, H, D)
                   for n in "qkv")
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        att = seg_attention(q, k, v, cu_full if l in cfg["full"] else cu_win).reshape(Pn, C)
        x = x + linear(att, P[pre + "attn.o.weight"], P[pre + "attn.o.bias"], bf16)
        h = rms_norm(x, P[pre + "mlp_norm.weight"], 1e-6)
        g = linear(h, P[pre + "mlp.gate.weight"], P[pre + "mlp.gate.bias"], bf16)
        u = linear(h, P[pre + "mlp.up.weight"], P[pre + "mlp.up.bias"], bf16)
        x = x + linear(F.silu(g) * u, P[pre + "mlp.down.weight"], P[pre + "mlp.down.bias"], bf16)
    m = rms_norm(x, P["vision.merger.norm.weight"], 1e-6).reshape(Pn // unit, unit * C)
    m = F.gelu(linear(m, P["vision.merger.fc1.weight"], P["vision.merger.fc1.bias"], bf16))
    m = linear(m, P["vision.merger.fc2.weight"], P["vision.merger.fc2.bias"], bf16)
    return m[np.argsort(order)]


def llava_forward(P, pixels, grids, cfg, bf16):
    H, depth, D = cfg["heads"], cfg["depth"], cfg["hidden"] // cfg["heads"]
    x = linear(pixels, P["vision.patch_embed.weight"], P["vision.patch_embed.bias"], bf16)
    npos = P["vision.pos_embed.weight"].shape[0]
    x = x + P["vision.pos_embed.weight"].repeat(x.shape[0] // npos, 1)
    cu = [npos * i for i in range(x.shape[0] // npos + 1)]
    Pn, C = x.shape
    for l in range(depth):
        pre = "vision.blocks.%d." % l
        h = layer_norm(x, P[pre + "attn_norm.weight"], P[pre + "attn_norm.bias"], 1e-5)
        q, k, v = (linear(h, P[pre + "attn.%s.weight" % n], P[pre + "attn.%s.bias" % n], bf16).reshape(Pn, H, D)
                   for n in "qkv")
        x = x + linear(seg_attention(q, k, v, cu).reshape(Pn, C), P[pre + "attn.o.weight"], P[pre + "attn.o.bias"], bf16)
        h = layer_norm(x, P[pre + "mlp_norm.weight"], P[pre + "mlp_norm.bias"], 1e-5)
        h = F.gelu(linear(h, P[pre + "mlp.up.weight"], P[pre + "mlp.up.bias"], bf16))
        x = x + linear(h, P[pre + "mlp.down.weight"], P[pre + "mlp.down.bias"], bf16)
    x = layer_norm(x, P["vision.post_norm.weight"], P["vision.post_norm.bias"], 1e-5)
    x = F.gelu(linear(x, P["vision.merger.fc1.weight"], P["vision.merger.fc1.bias"], bf16))
    return linear(x, P["vision.merger.fc2.weight"], P["vision.merger.fc2.bias"], bf16)


def config_of(tensors, meta):
    names = [n[len("param."):] for n in tensors if n.startswith("param.")]
    depth = 1 + max(int(n.split(".")[2]) for n in names if n.startswith("vision.blocks."))
    hidden = tensors["param.vision.blocks.0.attn.q.weight"].shape[0]
    qwen = "param.vision.merger.norm.weight" in tensors
    preset = meta["preset"]
    # the presets' remaining dimensions (src/model/spec.c)
    known = {"tiny-qwen2.5-vl": dict(heads=2, window=56, patch=14, merge=2, full=[1]),
             "tiny-llava": dict(heads=2, patch=14, merge=1, full=[])}
    cfg = dict(known[preset], depth=depth, hidden=hidden, qwen=qwen)
    return cfg


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    tensors, meta = st_io.read(sys.argv[1])
    cfg = config_of(tensors, meta)
    bf16 = meta["dtype"] == "bf16"
    dtype = torch.float32 if bf16 else torch.float64
    P = {n[len("param."):]: torch.tensor(np.asarray(a), dtype=dtype, requires_grad=True)
         for n, a in tensors.items() if n.startswith("param.")}
    pixels = torch.tensor(np.asarray(tensors["pixels"]), dtype=dtype)
    grids = [tuple(int(x) for x in g) for g in np.asarray(tensors["grid"])]
    fwd = qwen_forward if cfg["qwen"] else llava_forward
    out = fwd(P, pixels, grids, cfg, bf16)
    R = torch.tensor(np.asarray(tensors["R"]), dtype=dtype)
    (out * R).sum().backward()
    tol_out, tol_grad = (1e-2, 1e-2) if bf16 else (1e-5, 1e-4)
    fails, worst = [], 0.0
    e = rel(tensors["out"], out.detach().numpy())
    print("%-44s rel %.3e (tol %.0e)" % ("output", e, tol_out))
    if not e <= tol_out:
        fails.append("output")
    for n, p in P.items():
        if not cfg["qwen"] and n.endswith("attn.k.bias"):
            # without rotary positions a key bias adds a constant to each score row, which the
            # softmax ignores: the exact gradient is 0, so compare the size of loom's against
            # the same block's query-bias gradient instead
            e = float(np.linalg.norm(tensors["grad." + n]) /
                      np.linalg.norm(P[n.replace("k.bias", "q.bias")].grad.numpy()))
        else:
            e = rel(tensors["grad." + n], p.grad.numpy())
        worst = max(worst, e)
        if not e <= tol_grad:
            fails.append(n)
            print("%-44s rel %.3e (tol %.0e) FAIL" % ("grad." + n, e, tol_grad))
    print("gradients of %d tensors: worst rel %.3e (tol %.0e)" % (len(P), worst, tol_grad))
    if fails:
        print("FAILED: " + ", ".join(fails))
        return 1
    print("all vision checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
