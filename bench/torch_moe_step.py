#!/usr/bin/python3
"""The PyTorch peer of `loom bench model` for Qwen3-MoE models (bench/moe_vs_pytorch.sh): the same
model, micro-batch, threads and optimizer step (forward, backward, global-norm clip 1.0,
torch.optim.AdamW), fp32, written the way Hugging Face transformers 4.5x writes Qwen3-MoE:

  - Qwen3MoeSparseMoeBlock.forward: the router (Linear C -> E, no bias), softmax in fp32, top-k,
    the k weights renormalised (norm_topk_prob), then a loop over the experts that received
    tokens: torch.where on the one-hot mask, the expert's SwiGLU (Qwen3MoeMLP, bias-free) on
    those rows, scaled by their weights, index_add_ into the output;
  - Qwen3MoeForCausalLM's loss: cross-entropy + router_aux_loss_coef * load_balancing_loss_func
    over every MoE layer's router logits (tests/torch/ref_moe.py's copy of HF's function);
  - attention: q/k/v projections, per-head RMSNorm of q and k (Qwen3's q_norm, k_norm) before
    RoPE, GQA by repeat_interleave, an explicit masked softmax (torch 1.13 has no fused
    attention), the output projection; RMSNorm, rotate_half and the rotary tables from
    tests/torch/ref_moe.py (written from HF's definitions);
  - untied embeddings and LM head, the vocabulary padded to 64 as loom pads it.
With --experts 0 the same model with a dense SwiGLU MLP of --intermediate (the dense baseline).
Tokens are random ids, as `loom bench model` uses: the router at initialisation spreads them
over the experts nearly evenly in both.

Prints one JSON object: step_s (median of the timed steps), cpu_step_s (the same in CPU time of
the process: with one thread the step's own time, however loaded the machine), tokens_s, params,
active_params
(per token: the embeddings row, attention, the k experts chosen and the router, the head).

usage: bench/torch_moe_step.py --hidden 128 --layers 4 --heads 4 --kv-heads 2 --head-dim 48 \\
         --experts 8 --top-k 2 --moe-intermediate 96 --vocab 512 --batch 16 --seq 64 --steps 5
       (threads: OMP_NUM_THREADS, else every core)
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
import ref_moe  # noqa: E402  (HF's formulas: rms_norm, rotate_half, rope tables, the aux loss)


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.eps = eps

    def forward(self, x):
        return ref_moe.rms_norm(x, self.weight, self.eps)


class SwiGLU(nn.Module):
    """Qwen3MoeMLP: down(silu(gate x) * up x), no biases."""

    def __init__(self, c, inner):
        super().__init__()
        self.gate_proj = nn.Linear(c, inner, bias=False)
        self.up_proj = nn.Linear(c, inner, bias=False)
        self.down_proj = nn.Linear(inner, c, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoeBlock(nn.Module):
    """Qwen3MoeSparseMoeBlock.forward of transformers 4.5x, line for line."""

    def __init__(self, c, E, k, inner, norm_topk):
        super().__init__()
        self.num_experts, self.top_k, self.norm_topk_prob = E, k, norm_topk
        self.gate = nn.Linear(c, E, bias=False)
        self.experts = nn.ModuleList(SwiGLU(c, inner) for _ in range(E))

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros((batch_size * sequence_length, hidden_dim),
                                          dtype=hidden_states.dtype, device=hidden_states.device)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        C, H, Hkv, D = a.hidden, a.heads, a.kv_heads, a.head_dim
        self.H, self.Hkv, self.D = H, Hkv, D
        self.ln1, self.ln2 = RMSNorm(C, a.eps), RMSNorm(C, a.eps)
        self.q = nn.Linear(C, H * D, bias=False)
        self.k = nn.Linear(C, Hkv * D, bias=False)
        self.v = nn.Linear(C, Hkv * D, bias=False)
        self.o = nn.Linear(H * D, C, bias=False)
        self.q_norm, self.k_norm = RMSNorm(D, a.eps), RMSNorm(D, a.eps)
        self.moe = (SparseMoeBlock(C, a.experts, a.top_k, a.moe_intermediate, True)
                    if a.experts else None)
        self.mlp = None if a.experts else SwiGLU(C, a.intermediate)

    def forward(self, x, mask, cos, sin, router_logits):
        B, T, C = x.shape
        h = self.ln1(x)
        q = self.q_norm(self.q(h).view(B, T, self.H, self.D)).transpose(1, 2)
        k = self.k_norm(self.k(h).view(B, T, self.Hkv, self.D)).transpose(1, 2)
        v = self.v(h).view(B, T, self.Hkv, self.D).transpose(1, 2)
        q = q * cos + ref_moe.rotate_half(q) * sin
        k = k * cos + ref_moe.rotate_half(k) * sin
        if self.Hkv != self.H:
            k = k.repeat_interleave(self.H // self.Hkv, dim=1)
            v = v.repeat_interleave(self.H // self.Hkv, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.D))
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        x = x + self.o((att @ v).transpose(1, 2).reshape(B, T, self.H * self.D))
        h = self.ln2(x)
        if self.moe is None:
            return x + self.mlp(h)
        y, logits = self.moe(h)
        router_logits.append(logits)
        return x + y


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        Vp = (a.vocab + 63) // 64 * 64
        self.wte = nn.Embedding(Vp, a.hidden)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.lnf = RMSNorm(a.hidden, a.eps)
        self.lm_head = nn.Linear(a.hidden, Vp, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(a.seq, a.seq, dtype=torch.bool), 1),
                             persistent=False)
        self.cos, self.sin = ref_moe.rope_cos_sin(torch.arange(a.seq), a.head_dim, a.rope_theta,
                                                  torch.float32)
        for w in self.parameters():
            if w.dim() == 2:
                nn.init.normal_(w, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx)
        router_logits = []
        for blk in self.blocks:
            x = blk(x, self.mask, self.cos, self.sin, router_logits)
        logits = self.lm_head(self.lnf(x))[..., : self.a.vocab]
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        if router_logits:  # Qwen3MoeForCausalLM: + router_aux_loss_coef * aux
            aux = ref_moe.hf_load_balancing_loss_func(tuple(router_logits), self.a.experts,
                                                      self.a.top_k)
            loss = loss + self.a.aux_coef * aux
        return loss


def counts(model, a):
    """(parameters, parameters a token uses: all but the experts it is not routed to)."""
    total = sum(w.numel() for w in model.parameters())
    if not a.experts:
        return total, total
    per_expert = 3 * a.hidden * a.moe_intermediate
    return total, total - a.layers * (a.experts - a.top_k) * per_expert


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("hidden", 128), ("layers", 4), ("heads", 4), ("kv-heads", 2),
                          ("head-dim", 48), ("experts", 8), ("top-k", 2), ("moe-intermediate", 96),
                          ("intermediate", 352), ("vocab", 512), ("batch", 16), ("seq", 64),
                          ("steps", 5), ("warmup", 2)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--aux-coef", type=float, default=0.001)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Model(a)
    decay = [w for w in model.parameters() if w.dim() == 2]
    other = [w for w in model.parameters() if w.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}], lr=3e-4, betas=(0.9, 0.95),
                            eps=1e-8)
    tok = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    x, y = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
    times, cpu, losses = [], [], []
    for s in range(a.warmup + a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        losses.append(loss.item())
        if s >= a.warmup:
            times.append(dt)
            cpu.append(dc)
        warm = " (warm-up)" if s < a.warmup else ""
        print(f"  torch step {s}: {dt:.3f} s, loss {losses[-1]:.4f}{warm}", file=sys.stderr)
    step = statistics.median(times)
    total, active = counts(model, a)
    out = dict(peer="pytorch " + torch.__version__, B=a.batch, T=a.seq, threads=threads,
               experts=a.experts, step_s=step, step_min_s=min(times), step_max_s=max(times),
               cpu_step_s=statistics.median(cpu), cpu_step_min_s=min(cpu),
               tokens_s=a.batch * a.seq / step, params=total, active_params=active,
               peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0 ** 2,
               loss_first=losses[0], loss_last=losses[-1])
    text = json.dumps(out)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
