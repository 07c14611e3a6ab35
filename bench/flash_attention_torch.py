#!/usr/bin/python3
"""The peer of bench/flash_attention.c: PyTorch's causal attention on the same shape (B sequences,
T = 1024, 12 heads of 64, fp32), forward and backward, best of R, one thread, timed in this
thread's CPU time. torch.nn.functional.scaled_dot_product_attention where the installed torch
has it (2.0+), else the eager form HF models run (Debian's 1.13: q k^T scaled, the future
masked, softmax, times v; batched BLAS products over the whole T x T). The same FLOP count as
flash_attention.c (4 D forward, 10 D backward per visible (query, key) pair, the masked half
not counted), so the GFLOP/s of the two programs compare directly as useful work per second.
usage: OMP_NUM_THREADS=1 /usr/bin/python3 bench/flash_attention_torch.py [B] [R] (Debian python3-torch)"""
import sys
import time

import torch

B = int(sys.argv[1]) if len(sys.argv) > 1 else 1
R = int(sys.argv[2]) if len(sys.argv) > 2 else 5
T, H, D = 1024, 12, 64
torch.set_num_threads(1)
torch.manual_seed(1)
q, k, v, g = (torch.randn(B, H, T, D) for _ in range(4))
pairs = T * (T + 1) / 2
ff, fb = 4.0 * D * B * H * pairs, 10.0 * D * B * H * pairs
sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)


def attention(q, k, v):
    if sdpa is not None:
        return sdpa(q, k, v, is_causal=True)
    s = (q @ k.transpose(-1, -2)) * (D ** -0.5)
    return torch.softmax(s.masked_fill(future, float("-inf")), dim=-1) @ v


best_f = best_b = float("inf")
for _ in range(R):
    qq, kk, vv = (x.clone().requires_grad_(True) for x in (q, k, v))
    t0 = time.thread_time()
    out = attention(qq, kk, vv)
    t1 = time.thread_time()
    out.backward(g)
    t2 = time.thread_time()
    best_f, best_b = min(best_f, t1 - t0), min(best_b, t2 - t1)
print("torch %s fp32 (%s): forward %.4f s %.1f GFLOP/s, backward %.4f s %.1f GFLOP/s"
      % (torch.__version__, "sdpa" if sdpa else "eager", best_f, ff / best_f / 1e9, best_b, fb / best_b / 1e9))
