#!/usr/bin/python3
"""The PyTorch peer of `loom bench model`: the same model preset, micro-batch, dtype, threads
and optimizer step (forward, backward, global-norm clip 1.0, torch.optim.AdamW), written the
way a PyTorch 1.13 user writes it (nanoGPT-style modules; 1.13 has no fused attention, so
attention is the explicit masked softmax). bf16 is torch.autocast("cpu", torch.bfloat16) over
forward and loss, fp32 master weights and optimizer, as loom's bf16 mode.

Prints one JSON object: step_s (median of the timed steps), tokens_s, peak_rss_gib, ...

usage: bench/torch_step.py --model gpt2-124m --batch 8 --seq 1024 --dtype fp32 --steps 3
       (threads: OMP_NUM_THREADS, else every core; AMX: ONEDNN_MAX_CPU_ISA=AVX512_CORE_AMX)
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# the presets of src/model/spec.c that the benchmark uses (vocabulary padded to 64 as loom)
PRESETS = {
    "gpt2-124m": dict(arch="gpt2", vocab=50257, hidden=768, layers=12, heads=12, kv_heads=12,
                      inter=3072, eps=1e-5, theta=0, qkv_bias=True, tied=True),
    "gpt2-350m": dict(arch="gpt2", vocab=50257, hidden=1024, layers=24, heads=16, kv_heads=16,
                      inter=4096, eps=1e-5, theta=0, qkv_bias=True, tied=True),
    "qwen2.5-0.5b": dict(arch="llama", vocab=151936, hidden=896, layers=24, heads=14,
                         kv_heads=2, inter=4864, eps=1e-6, theta=1e6, qkv_bias=True, tied=True),
    "tiny-gpt2": dict(arch="gpt2", vocab=512, hidden=128, layers=4, heads=4, kv_heads=4,
                      inter=512, eps=1e-5, theta=0, qkv_bias=True, tied=True),
}


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(nn.Module):
    def __init__(self, p):
        super().__init__()
        C, H, Hkv = p["hidden"], p["heads"], p["kv_heads"]
        self.H, self.Hkv, self.D, self.gpt2 = H, Hkv, C // H, p["arch"] == "gpt2"
        norm = (lambda: nn.LayerNorm(C, eps=p["eps"])) if self.gpt2 else (lambda: RMSNorm(C, p["eps"]))
        self.ln1, self.ln2 = norm(), norm()
        self.q = nn.Linear(C, H * self.D, bias=p["qkv_bias"])
        self.k = nn.Linear(C, Hkv * self.D, bias=p["qkv_bias"])
        self.v = nn.Linear(C, Hkv * self.D, bias=p["qkv_bias"])
        self.o = nn.Linear(H * self.D, C, bias=self.gpt2)
        if self.gpt2:
            self.up = nn.Linear(C, p["inter"])
            self.down = nn.Linear(p["inter"], C)
        else:
            self.gate = nn.Linear(C, p["inter"], bias=False)
            self.up = nn.Linear(C, p["inter"], bias=False)
            self.down = nn.Linear(p["inter"], C, bias=False)

    def forward(self, x, mask, rope):
        B, T, C = x.shape
        h = self.ln1(x)
        q = self.q(h).view(B, T, self.H, self.D).transpose(1, 2)
        k = self.k(h).view(B, T, self.Hkv, self.D).transpose(1, 2)
        v = self.v(h).view(B, T, self.Hkv, self.D).transpose(1, 2)
        if rope is not None:
            cos, sin = rope
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if self.Hkv != self.H:
            k = k.repeat_interleave(self.H // self.Hkv, dim=1)
            v = v.repeat_interleave(self.H // self.Hkv, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.D))
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, self.H * self.D)
        x = x + self.o(y)
        h = self.ln2(x)
        if self.gpt2:
            h = self.down(F.gelu(self.up(h), approximate="tanh"))
        else:
            h = self.down(F.silu(self.gate(h)) * self.up(h))
        return x + h


class Model(nn.Module):
    def __init__(self, p, T):
        super().__init__()
        self.p = p
        Vp = (p["vocab"] + 63) // 64 * 64
        self.wte = nn.Embedding(Vp, p["hidden"])
        self.wpe = nn.Embedding(1024, p["hidden"]) if p["arch"] == "gpt2" else None
        self.blocks = nn.ModuleList(Block(p) for _ in range(p["layers"]))
        self.lnf = nn.LayerNorm(p["hidden"], eps=p["eps"]) if p["arch"] == "gpt2" else RMSNorm(p["hidden"], p["eps"])
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1), persistent=False)
        self.rope = None
        if p["arch"] != "gpt2":
            D = p["hidden"] // p["heads"]
            inv = p["theta"] ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
            ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
            ang = torch.cat((ang, ang), dim=-1)
            self.rope = (ang.cos().float(), ang.sin().float())
        for n, w in self.named_parameters():
            if w.dim() == 2:
                nn.init.normal_(w, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T))
        for blk in self.blocks:
            x = blk(x, self.mask, self.rope)
        logits = F.linear(self.lnf(x), self.wte.weight)  # tied head
        logits = logits[..., : self.p["vocab"]]
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-124m", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    p = PRESETS[a.model]
    model = Model(p, a.seq)
    decay = [w for w in model.parameters() if w.dim() == 2]
    other = [w for w in model.parameters() if w.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}], lr=3e-4, betas=(0.9, 0.95),
                            eps=1e-8)
    tok = torch.randint(0, p["vocab"], (a.batch, a.seq + 1))
    x, y = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
    times, losses = [], []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if s >= a.warmup:
            times.append(dt)
        print(f"  torch step {s}: {dt:.3f} s, loss {losses[-1]:.4f}{' (warm-up)' if s < a.warmup else ''}",
              file=sys.stderr)
    step = statistics.median(times)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0 / 1024.0
    out = dict(peer="pytorch " + torch.__version__, model=a.model, B=a.batch, T=a.seq,
               dtype=a.dtype, threads=threads, step_s=step, step_min_s=min(times),
               step_max_s=max(times), tokens_s=a.batch * a.seq / step, peak_rss_gib=rss,
               loss_first=losses[0], loss_last=losses[-1],
               isa=os.environ.get("ONEDNN_MAX_CPU_ISA", "default"))
    text = json.dumps(out)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
