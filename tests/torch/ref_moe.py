"""Independent PyTorch reference of the Mixture-of-Experts layer and of Qwen3 attention.

Written from Hugging Face's definitions (transformers, src/transformers/models/...), not from
loom's C code, so that a model-level check (tests/torch/ref_model.py) can import it:

  Qwen3MoeSparseMoeBlock / Qwen2MoeSparseMoeBlock / MixtralSparseMoeBlock .forward:
      router_logits = self.gate(hidden_states)                       # Linear(C, E, bias=False)
      routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
      routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
      if self.norm_topk_prob:                                        # Mixtral: always
          routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
      for each expert hit: idx, top_x = torch.where(expert_mask[expert_idx])
          current_hidden_states = expert_layer(hidden_states[top_x]) * routing_weights[top_x, idx, None]
          final_hidden_states.index_add_(0, top_x, current_hidden_states)
  Qwen3MoeMLP.forward: down_proj(act_fn(gate_proj(x)) * up_proj(x)), act_fn = silu, no biases
  Qwen2MoeSparseMoeBlock, the shared expert:
      shared_expert_output = self.shared_expert(hidden_states)       # MLP of shared_expert_intermediate_size
      shared_expert_output = F.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output
      final_hidden_states = final_hidden_states + shared_expert_output   # shared_expert_gate: Linear(C, 1, bias=False)
  load_balancing_loss_func (no attention mask), over the router logits of every layer:
      concatenated = cat(gate_logits, dim=0); routing_weights = softmax(concatenated, -1)
      _, selected_experts = topk(routing_weights, top_k, -1); expert_mask = one_hot(selected_experts, E)
      tokens_per_expert = mean(expert_mask.float(), dim=0)          # (k, E)
      router_prob_per_expert = mean(routing_weights, dim=0)         # (E)
      return sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * E
  Megatron-LM's z_loss_func: mean(square(logsumexp(logits, -1))) * z_loss_coeff (one per layer)
  Qwen3MoeAttention.forward: q = q_norm(q_proj(x).view(..., head_dim)), k = k_norm(k_proj(x)...),
      v = v_proj(x); RoPE (rotate_half) on q and k after the norms; GQA by repeat_kv; scaling
      head_dim**-0.5; causal; o_proj. head_dim is a config entry, not hidden / heads.
      q_norm, k_norm: Qwen3MoeRMSNorm(head_dim): weight * x * rsqrt(mean(x^2) + eps).

Additions HF does not have, as loom defines them (include/loom/kernels_moe.h):
  - sel_bias (E): added to the probabilities for choosing only (DeepSeek-V3's auxiliary-loss-
    free balancing); the weights stay the chosen probabilities. The load-balancing counts are
    the selections made (with sel_bias), before any capacity dropping.
  - top-k ties go to the lower expert index (torch.topk leaves ties unspecified; here a stable
    descending sort).
  - capacity (Megatron's drop policies): an expert keeps at most `capacity` (token, slot)
    pairs; over it, the pairs of largest routing weight (ties: the earlier token) or the
    earliest tokens stay; dropped pairs contribute nothing.
  - bf16: every linear's input, weight and output gradient rounded to bf16, products
    accumulated in the working dtype (loom's training.dtype=bf16 without native bf16 GEMMs).

Works in float64 and float32 (the dtype of the tensors given). torch 1.13.
"""
import math

import torch
import torch.nn.functional as F


# ----------------------------------------------------------------------------------------------
# linear layers, optionally with bf16 operands


def bf16_round(t):
    """Round to the nearest bf16 value (ties to even), returned in t's dtype."""
    return t.to(torch.bfloat16).to(t.dtype)


class _BF16Linear(torch.autograd.Function):
    """y = round(x) round(W)^T; dx = round(dy) round(W), dW = round(dy)^T round(x)."""

    @staticmethod
    def forward(ctx, x, w):
        xr, wr = bf16_round(x), bf16_round(w)
        ctx.save_for_backward(xr, wr)
        return xr @ wr.t()

    @staticmethod
    def backward(ctx, dy):
        xr, wr = ctx.saved_tensors
        dyr = bf16_round(dy)
        return dyr @ wr, dyr.t() @ xr


def linear(x, w, bf16=False):
    """x (..., in) @ w (out, in)^T, no bias (every MoE and Qwen3 projection is bias-free)."""
    if not bf16:
        return F.linear(x, w)
    shp = x.shape
    return _BF16Linear.apply(x.reshape(-1, shp[-1]), w).reshape(*shp[:-1], w.shape[0])


def swiglu_mlp(x, gate, up, down, bf16=False):
    """Qwen3MoeMLP / Qwen2MoeMLP / MixtralBlockSparseTop2MLP: down(silu(gate x) * up x)."""
    return linear(F.silu(linear(x, gate, bf16)) * linear(x, up, bf16), down, bf16)


# ----------------------------------------------------------------------------------------------
# routing


def topk_lower_first(scores, k):
    """Indices (N, k) of the k largest scores of each row, best first, a tie going to the lower
    index (a stable descending sort keeps equal scores in index order)."""
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[:, :k]


def route(logits, k, norm_topk, sel_bias=None):
    """logits (N, E) -> probs (N, E) (softmax in the logits' dtype, at least fp32), idx (N, k),
    weights (N, k)."""
    probs = F.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    scores = probs.detach() if sel_bias is None else probs.detach() + sel_bias
    idx = topk_lower_first(scores, k)
    w = probs.gather(1, idx)
    if norm_topk:
        w = w / w.sum(dim=-1, keepdim=True)
    return probs, idx, w


def capacity(capacity_factor, N, k, E):
    """ceil(capacity_factor * N * k / E) pairs per expert; 0: no limit."""
    if capacity_factor <= 0:
        return 0
    return max(1, math.ceil(capacity_factor * N * k / E))


def keep_mask(idx, w, E, cap, drop_by_position):
    """(N, k) bool: the pairs each expert keeps under capacity cap (0: all)."""
    N, k = idx.shape
    keep = torch.ones(N, k, dtype=torch.bool)
    if cap <= 0:
        return keep
    wd = w.detach()
    for e in range(E):
        pairs = [(t, j) for t in range(N) for j in range(k) if int(idx[t, j]) == e]
        if len(pairs) <= cap:
            continue
        if drop_by_position:
            dropped = pairs[cap:]
        else:  # largest weight first, the earlier token on a tie
            order = sorted(pairs, key=lambda p: (-float(wd[p[0], p[1]]), p[0]))
            dropped = order[cap:]
        for t, j in dropped:
            keep[t, j] = False
    return keep


# ----------------------------------------------------------------------------------------------
# the MoE layer


def moe_block(x, P, cfg, bf16=False):
    """x (N, C); P: dict with router (E, C), sel_bias (E) or None, experts_gate / experts_up
    (E, Ie, C), experts_down (E, C, Ie), and with a shared expert shared_gate_proj, shared_up
    (Is, C), shared_down (C, Is), shared_expert_gate (1, C). cfg: E, k, norm_topk,
    capacity_factor, drop_by_position, shared (bool).
    Returns y (N, C) and a dict: logits, probs, idx, w, keep (N, k) bool, capacity, dropped."""
    N, C = x.shape
    E, k = cfg["E"], cfg["k"]
    logits = linear(x, P["router"], bf16)
    probs, idx, w = route(logits, k, cfg["norm_topk"], P.get("sel_bias"))
    cap = capacity(cfg.get("capacity_factor", 0), N, k, E)
    keep = keep_mask(idx, w, E, cap, cfg.get("drop_by_position", False))
    y = torch.zeros_like(x)
    for e in range(E):  # HF's loop over the experts hit, on the kept pairs
        top_x, slot = torch.where((idx == e) & keep)
        if top_x.numel() == 0:
            continue
        out = swiglu_mlp(x[top_x], P["experts_gate"][e], P["experts_up"][e], P["experts_down"][e], bf16)
        y = y.index_add(0, top_x, out * w[top_x, slot, None])
    if cfg.get("shared"):
        sh = swiglu_mlp(x, P["shared_gate_proj"], P["shared_up"], P["shared_down"], bf16)
        y = y + torch.sigmoid(linear(x, P["shared_expert_gate"], bf16)) * sh
    info = dict(logits=logits, probs=probs, idx=idx, w=w, keep=keep, capacity=cap,
                dropped=int((~keep).sum()))
    return y, info


def load_balancing_loss(probs_list, idx_list, E):
    """HF's load_balancing_loss_func on given probabilities and selections of every layer:
    E * sum_{j,e} mean_rows(onehot(idx))[j, e] * mean_rows(probs)[e]."""
    probs = torch.cat(probs_list, dim=0)
    idx = torch.cat(idx_list, dim=0)
    expert_mask = F.one_hot(idx, E)
    tokens_per_expert = torch.mean(expert_mask.to(probs.dtype), dim=0)  # (k, E)
    router_prob_per_expert = torch.mean(probs, dim=0)                    # (E)
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * E


def hf_load_balancing_loss_func(gate_logits, num_experts, top_k):
    """HF's function as written (no attention mask): it chooses again with topk of the softmax,
    so it equals load_balancing_loss when there is no sel_bias and no tie."""
    concatenated = torch.cat(list(gate_logits), dim=0)
    routing_weights = F.softmax(concatenated, dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected_experts, num_experts)
    tokens_per_expert = torch.mean(expert_mask.to(routing_weights.dtype), dim=0)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * num_experts


def z_loss(logits, coef):
    """Megatron-LM's z_loss_func of one layer's router logits (N, E)."""
    return torch.mean(torch.square(torch.logsumexp(logits, dim=-1))) * coef


# ----------------------------------------------------------------------------------------------
# Qwen3 attention


def rms_norm(x, w, eps):
    """Qwen3MoeRMSNorm over the last dim."""
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_cos_sin(positions, D, theta, dtype):
    """HF's default rotary tables for positions (T,): inv_freq = theta^(-arange(0, D, 2)/D),
    emb = cat(freqs, freqs) (angles in float64 here; HF forms them in float32)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(positions.to(torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def qwen3_attention(x, P, cfg):
    """x (B, T, C); P: q_proj (Hq*D, C), k_proj, v_proj (Hkv*D, C), o_proj (C, Hq*D), q_norm,
    k_norm (D); cfg: heads, kv_heads, head_dim, rope_theta, eps. Causal, positions 0..T-1.
    Returns (B, T, C)."""
    B, T, C = x.shape
    Hq, Hkv, D = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    q = rms_norm(linear(x, P["q_proj"]).view(B, T, Hq, D), P["q_norm"], cfg["eps"]).transpose(1, 2)
    k = rms_norm(linear(x, P["k_proj"]).view(B, T, Hkv, D), P["k_norm"], cfg["eps"]).transpose(1, 2)
    v = linear(x, P["v_proj"]).view(B, T, Hkv, D).transpose(1, 2)
    cos, sin = rope_cos_sin(torch.arange(T), D, cfg["rope_theta"], x.dtype)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    rep = Hq // Hkv  # repeat_kv
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(2, 3)) * D ** -0.5
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    att = torch.softmax(scores, dim=-1) @ v  # (B, Hq, T, D)
    return linear(att.transpose(1, 2).reshape(B, T, Hq * D), P["o_proj"])
