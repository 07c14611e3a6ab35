"""PyTorch peer of `loom generate` for bench/generate_vs_pytorch.sh: GPT-2 written by hand
over a Hugging Face export (GPT2LMHeadModel names, Conv1D (in, out) weights), with a KV cache
like loom's: the prompt batch is prefilled once, then one token per step attends to the cached
keys/values (softmax(q k^T / sqrt(D)) v over the cache; torch 1.13 of Debian has no
scaled_dot_product_attention); greedy; fp32; torch threads
set to --threads; --dtype bf16 runs the whole model in torch.bfloat16. Prints one JSON line: prefill/decode seconds and tokens, and the ids.
usage: generate_torch.py HF_DIR --prompts 'ids;ids;...' --new N --threads T [--dtype bf16]"""
import argparse
import json
import math
import os
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", "export with --dtype f32"
        b, end = e["data_offsets"]
        out[name] = torch.from_numpy(
            np.frombuffer(buf[8 + n + b:8 + n + end], dtype="<f4").reshape(e["shape"]).copy())
    return out


class CachedGPT2:
    def __init__(self, hf_dir, dtype):
        with open(os.path.join(hf_dir, "config.json")) as f:
            self.cfg = json.load(f)
        self.sd = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
        self.C, self.H, self.L = self.cfg["n_embd"], self.cfg["n_head"], self.cfg["n_layer"]
        self.D, self.eps = self.C // self.H, self.cfg.get("layer_norm_epsilon", 1e-5)
        tied = self.cfg.get("tie_word_embeddings", True)
        self.head = self.sd["wte.weight" if tied else "lm_head.weight"]
        # Conv1D (in, out) weights stored as (out, in) like nn.Linear: the fastest torch form
        for name in list(self.sd):
            if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
                self.sd[name] = self.sd[name].t().contiguous()
        for name in self.sd:
            self.sd[name] = self.sd[name].to(dtype)
        self.head = self.head.to(dtype)

    @staticmethod
    def lin(x, w, b):
        """x (R, in) @ w (out, in)^T + b: torch.mv for one row (on Debian's torch 1.13 about 4x
        faster than a 1-row matmul), F.linear otherwise"""
        if x.shape[0] == 1:
            return (torch.mv(w, x[0]) + b)[None]
        return F.linear(x, w, b)

    def w(self, name):
        return self.sd[name]

    def forward(self, tokens, pos0, kc, vc):
        """tokens (B, n) at positions pos0..pos0+n-1; kc/vc[l] (B, H, S, D) caches."""
        B, n = tokens.shape
        C, H, D = self.C, self.H, self.D
        x = self.w("wte.weight")[tokens] + self.w("wpe.weight")[pos0:pos0 + n]
        for i in range(self.L):
            p = "h.%d." % i
            h = F.layer_norm(x, (C,), self.w(p + "ln_1.weight"), self.w(p + "ln_1.bias"), self.eps)
            qkv = self.lin(h.reshape(B * n, C), self.w(p + "attn.c_attn.weight"),
                           self.w(p + "attn.c_attn.bias")).reshape(B, n, 3, H, D)
            q, k, v = qkv.unbind(2)
            kc[i][:, :, pos0:pos0 + n] = k.transpose(1, 2)
            vc[i][:, :, pos0:pos0 + n] = v.transpose(1, 2)
            K, V = kc[i][:, :, :pos0 + n], vc[i][:, :, :pos0 + n]  # (B, H, pos0+n, D)
            sc = torch.matmul(q.transpose(1, 2), K.transpose(2, 3)) * (1.0 / math.sqrt(D))
            if n > 1:  # causal inside the new tokens
                mask = torch.ones(n, pos0 + n, dtype=torch.bool).tril(pos0)
                sc = sc.masked_fill(~mask, float("-inf"))
            a = torch.matmul(torch.softmax(sc, -1), V)  # (B, H, n, D)
            a = a.transpose(1, 2).reshape(B * n, C)
            x = x + self.lin(a, self.w(p + "attn.c_proj.weight"),
                             self.w(p + "attn.c_proj.bias")).reshape(B, n, C)
            h = F.layer_norm(x, (C,), self.w(p + "ln_2.weight"), self.w(p + "ln_2.bias"), self.eps)
            u = F.gelu(self.lin(h.reshape(B * n, C), self.w(p + "mlp.c_fc.weight"),
                                self.w(p + "mlp.c_fc.bias")), approximate="tanh")
            x = x + self.lin(u, self.w(p + "mlp.c_proj.weight"),
                             self.w(p + "mlp.c_proj.bias")).reshape(B, n, C)
        h = F.layer_norm(x[:, -1], (C,), self.w("ln_f.weight"), self.w("ln_f.bias"), self.eps)
        if B == 1:
            return torch.mv(self.head, h[0])[None]
        return h @ self.head.t()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--new", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    m = CachedGPT2(a.hf_dir, dt)
    prompts = [[int(t) for t in p.split(",")] for p in a.prompts.split(";")]
    assert len({len(p) for p in prompts}) == 1, "the PyTorch peer takes prompts of one length"
    B, n, S = len(prompts), len(prompts[0]), len(prompts[0]) + a.new
    with torch.inference_mode():
        kc = [torch.zeros(B, m.H, S, m.D, dtype=dt) for _ in range(m.L)]
        vc = [torch.zeros(B, m.H, S, m.D, dtype=dt) for _ in range(m.L)]
        tok = torch.tensor(prompts)
        t0 = time.perf_counter()
        nxt = m.forward(tok, 0, kc, vc).argmax(-1)
        t1 = time.perf_counter()
        out = [nxt]
        for s in range(a.new - 1):
            nxt = m.forward(nxt[:, None], n + s, kc, vc).argmax(-1)
            out.append(nxt)
        t2 = time.perf_counter()
    ids = torch.stack(out, 1).tolist()
    print(json.dumps({"prefill_s": t1 - t0, "prefill_tokens": B * n, "decode_s": t2 - t1,
                      "decode_tokens": B * (a.new - 1), "ids": ids}))


if __name__ == "__main__":
    main()
