#!/usr/bin/python3
"""Check a whole vision-language forward/backward of loom against PyTorch (float64): the
vision encoder of check_vision.py, its tokens scattered into the text sequence where loom's
slot map says (the image-pad positions, in order), the Llama/Qwen2 text model with multimodal
rotary positions (Qwen2-VL: frequency pairs split into temporal/height/width sections, each
taking its own position id; plain 1D positions 0..T-1 for LLaVA), and the token-mean cross-entropy
over the non-ignored targets. Tolerances as for the text model (check_refdump.py): logits and
loss 1e-5, every gradient 1e-4 relative norm (key biases without rotary: compared in size
against the query-bias gradient, their exact value being 0).

usage: check_vlm.py DUMP.safetensors (written by loom_vlm_dump)"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402
from check_vision import config_of, llava_forward, qwen_forward, rel  # noqa: E402
from ref_model import causal_attention, linear, rms_norm, rotate_half  # noqa: E402

torch.set_num_threads(1)
TEXT = {  # the presets' text dimensions (src/model/spec.c)
    "tiny-qwen2.5-vl": dict(L=2, Hq=4, Hkv=2, V=512, theta=10000.0, eps=1e-6, sections=[2, 3, 3], tied=True),
    "tiny-llava": dict(L=2, Hq=4, Hkv=2, V=512, theta=10000.0, eps=1e-6, sections=None, tied=False),
}


def rotary(positions, D, theta, sections):
    """cos, sin (B, T, D) from (3, B, T) ids (sections) or the first row alone (1D)"""
    half = D // 2
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    pos = torch.tensor(positions, dtype=torch.float64)
    if sections:
        which = torch.tensor(sum(([s] * n for s, n in enumerate(sections)), []))
        ang = pos[which, :, :].permute(1, 2, 0) * inv  # (B, T, half): pair i uses section of i
    else:  # plain rotary over the token index (LLaVA ignores the multimodal ids)
        ang = torch.arange(pos.shape[2], dtype=torch.float64).expand(pos.shape[1], -1)[..., None] * inv
    emb = torch.cat([ang, ang], -1)
    assert emb.shape[-1] == 2 * half
    return emb.cos(), emb.sin()


def forward(P, tensors, tx, vcfg):
    """logits (B, T, rows of the head) and the loss of the whole VLM on the dump's inputs,
    from reference parameters P named as loom names them"""
    tokens = torch.tensor(np.asarray(tensors["tokens"]), dtype=torch.long)
    targets = torch.tensor(np.asarray(tensors["targets"]), dtype=torch.long)
    slot = np.asarray(tensors["slot"])
    B, T = tokens.shape
    C = P["embed.weight"].shape[1]
    D = C // tx["Hq"]
    dtype = P["embed.weight"].dtype
    pixels = torch.tensor(np.asarray(tensors["pixels"]), dtype=dtype)
    grids = [tuple(int(x) for x in g) for g in np.asarray(tensors["grid"])]
    vis = (qwen_forward if vcfg["qwen"] else llava_forward)(P, pixels, grids, vcfg, False)
    x = P["embed.weight"][tokens]
    rows = [(b, t) for b in range(B) for t in range(T) if slot[b, t] >= 0]
    order = [int(slot[b, t]) for b, t in rows]
    assert order == list(range(len(order))), "vision tokens fill the pads in order"
    idx = torch.tensor([b * T + t for b, t in rows])
    x = x.reshape(B * T, C).index_copy(0, idx, vis).reshape(B, T, C)
    cos, sin = rotary(np.asarray(tensors["positions"]), D, tx["theta"], tx["sections"])
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    for l in range(tx["L"]):
        pre = "layers.%d." % l
        h = rms_norm(x, P[pre + "attn_norm.weight"], tx["eps"])
        q = linear(h, P[pre + "attn.q.weight"], P.get(pre + "attn.q.bias"), False).view(B, T, tx["Hq"], D)
        k = linear(h, P[pre + "attn.k.weight"], P.get(pre + "attn.k.bias"), False).view(B, T, tx["Hkv"], D)
        v = linear(h, P[pre + "attn.v.weight"], P.get(pre + "attn.v.bias"), False).view(B, T, tx["Hkv"], D)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        x = x + linear(causal_attention(q, k, v, tx["Hq"], tx["Hkv"]), P[pre + "attn.o.weight"], None, False)
        h = rms_norm(x, P[pre + "mlp_norm.weight"], tx["eps"])
        u = F.silu(linear(h, P[pre + "mlp.gate.weight"], None, False)) * linear(h, P[pre + "mlp.up.weight"], None, False)
        x = x + linear(u, P[pre + "mlp.down.weight"], None, False)
    h = rms_norm(x, P["final_norm.weight"], tx["eps"])
    logits = linear(h, P["embed.weight"] if tx["tied"] else P["lm_head.weight"], None, False)
    loss = F.cross_entropy(logits[..., :tx["V"]].reshape(-1, tx["V"]), targets.reshape(-1),
                           ignore_index=-100)
    return logits, loss


def main():
    tensors, meta = st_io.read(sys.argv[1])
    preset = meta["preset"]
    tx = TEXT[preset]
    vcfg = config_of(tensors, meta)
    P = {n[6:]: torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=True)
         for n, a in tensors.items() if n.startswith("param.")}
    logits, loss = forward(P, tensors, tx, vcfg)
    loss.backward()
    fails = []
    checks = [("logits", rel(tensors["logits"], logits.detach().numpy()), 1e-5),
              ("loss", rel(tensors["loss"], [loss.item()]), 1e-5)]
    for n, p in P.items():
        if p.grad is None:
            continue
        if n.endswith("attn.k.bias") and not vcfg["qwen"] and n.startswith("vision."):
            e = float(np.linalg.norm(tensors["grad." + n]) /
                      np.linalg.norm(P[n.replace("k.bias", "q.bias")].grad.numpy()))
        else:
            e = rel(tensors["grad." + n], p.grad.numpy())
        checks.append(("grad." + n, e, 1e-4))
    worst = max((c for c in checks if c[0].startswith("grad.")), key=lambda c: c[1])
    for name, e, tol in checks:
        if name in ("logits", "loss") or not e <= tol:
            print("%-44s rel %.3e (tol %.0e)%s" % (name, e, tol, "" if e <= tol else " FAIL"))
        if not e <= tol:
            fails.append(name)
    print("gradients of %d tensors: worst %s %.3e" % (len(checks) - 2, worst[0], worst[1]))
    if fails:
        print("FAILED: " + ", ".join(fails))
        return 1
    print("all vision-language checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
