"""Forward passes of Hugging Face Qwen3, Qwen3-MoE, Qwen2-MoE and Mixtral checkpoints, written
from transformers 4.5x (modeling_qwen3.py, modeling_qwen3_moe.py, modeling_qwen2_moe.py,
modeling_mixtral.py), independent of loom: they read only a config.json (as a dict) and HF
tensor names, and compute in float64.

What each class computes (eager attention, no cache, one sequence, positions 0..T-1):
  - embed_tokens; per layer x += o_proj(attn(input_layernorm(x)));
    x += mlp(post_attention_layernorm(x)); logits = lm_head(norm(x)) (embed_tokens when tied).
  - RMSNorm: w * x / sqrt(mean(x^2) + rms_norm_eps).
  - Attention: q/k/v_proj (biases: Qwen2-MoE's qkv_bias, default true; Qwen3's
    attention_bias, which also biases o_proj; Mixtral none); Qwen3 / Qwen3-MoE apply q_norm /
    k_norm (RMSNorm over head_dim, per head) to the projections before RoPE; rotate_half RoPE
    with inv_freq = rope_theta^(-2i/head_dim); scores * head_dim^-0.5, causal, GQA repeat_kv.
  - Which layers are sparse (Qwen{2,3}MoeDecoderLayer): layer not in mlp_only_layers and
    num_experts > 0 and (layer+1) % decoder_sparse_step == 0; Mixtral: every layer. Dense
    layers: down(silu(gate(x)) * up(x)) of intermediate_size.
  - Sparse block (Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock, MixtralSparseMoeBlock):
    router_logits = gate(x) (no bias); p = softmax(router_logits) over all experts (fp32 in HF,
    float64 here); top num_experts_per_tok of p; the k weights divided by their sum when
    norm_topk_prob (Mixtral: always); out = sum_k w_k * expert_k(x), expert =
    down(silu(gate(x)) * up(x)) of moe_intermediate_size (Mixtral: w2(silu(w1 x) * w3 x) of
    intermediate_size). Qwen2-MoE adds sigmoid(shared_expert_gate(x)) * shared_expert(x).
  - gate.e_score_correction_bias (E), where the file has one (DeepSeek-V3's auxiliary-loss-free
    balancing; modeling_deepseek_v3.py: topk over scores + bias, the weights gathered from the
    scores): added to p for choosing the experts only. transformers' Qwen/Mixtral classes have
    no such tensor and ignore it.

`mutate` names a deliberate mistake (MUTATIONS), used by hf_moe_logits.py to show that the
comparison would catch it. `trace` (a dict), when given, receives per sparse layer:
"margins", the smallest over the tokens, chosen experts i and unchosen j of
(s_i - s_j) / (p_i + p_j), s the selection scores and p the probabilities: an error of eps in
the router logits moves each p_i by at most 2 eps p_i, so no selection flips while
2 eps < margin (without a bias the margin is tanh of half the k-th/(k+1)-th logit gap);
"chosen", the experts chosen (T, k); "chosen_unbiased", those the probabilities alone would
choose; "router", the router logits (T, E).
"""
import numpy as np
import torch
import torch.nn.functional as F

FAMILIES = ("qwen3", "qwen3_moe", "qwen2_moe", "mixtral")
MUTATIONS = {
    "norm_topk_flipped": "renormalise the top-k weights exactly when norm_topk_prob is false",
    "shared_gate_dropped": "Qwen2-MoE's shared expert added without sigmoid(shared_expert_gate)",
    "bias_ignored": "the selection bias ignored (what transformers' Qwen/Mixtral classes do)",
    "bias_in_weights": "the selection bias also added to the weights of the chosen experts",
    "qk_norm_dropped": "no q_norm / k_norm",
    "qk_norm_after_rope": "q_norm / k_norm applied after RoPE",
    "experts_shifted": "expert e computed with expert (e+1) % E's weights",
    "gate_up_swapped": "silu(up(x)) * gate(x) in the experts",
    "qkv_bias_dropped": "q/k/v biases ignored",
    "softmax_after_topk": "softmax over the k chosen router logits only",
}


def _cfg_checks(cfg):
    """Refuse configs whose forward differs from the one written here."""
    t = cfg["model_type"]
    if t not in FAMILIES:
        raise ValueError("model_type %r: not one of %s" % (t, FAMILIES))
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError("hidden_act %r: only silu is written here" % cfg["hidden_act"])
    if cfg.get("rope_scaling"):
        raise ValueError("rope_scaling %r: only the default RoPE is written here" %
                         cfg["rope_scaling"])
    if cfg.get("use_sliding_window") or (t == "mixtral" and cfg.get("sliding_window")):
        raise ValueError("sliding-window attention is not written here")
    if cfg.get("router_jitter_noise", 0.0):
        raise ValueError("router_jitter_noise: training-time noise, not written here")


def head_dim(cfg):
    t = cfg["model_type"]
    if t == "qwen3":  # Qwen3Config(head_dim=128)
        return cfg.get("head_dim", 128)
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def is_sparse(cfg, layer):
    t = cfg["model_type"]
    if t == "mixtral":
        return True
    if t == "qwen3":
        return False
    return layer not in (cfg.get("mlp_only_layers") or []) and cfg["num_experts"] > 0 and \
        (layer + 1) % cfg.get("decoder_sparse_step", 1) == 0


def _rope(T, D, theta):
    """cos, sin (T, D): LlamaRotaryEmbedding's default rope (emb = cat(freqs, freqs))."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def logits(sd, cfg, tokens, mutate=None, trace=None, dtype=torch.float64):
    """sd: HF name -> numpy array; returns logits (T, vocab_size) in dtype (float64; float32
    only to measure what fp32 rounding alone does to these models)."""
    if mutate is not None and mutate not in MUTATIONS:
        raise ValueError("unknown mutation %r" % mutate)
    _cfg_checks(cfg)
    t = cfg["model_type"]
    H = cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads") or H
    D = head_dim(cfg)
    eps = cfg.get("rms_norm_eps", 1e-5 if t == "mixtral" else 1e-6)
    theta = cfg.get("rope_theta", 1e6 if t == "mixtral" else 10000.0)
    qk_norm = t in ("qwen3", "qwen3_moe") and mutate != "qk_norm_dropped"
    if t == "qwen2_moe":
        qkv_bias, o_bias = cfg.get("qkv_bias", True), False
    elif t == "mixtral":
        qkv_bias = o_bias = False
    else:
        qkv_bias = o_bias = cfg.get("attention_bias", False)
    if mutate == "qkv_bias_dropped":
        qkv_bias = False
    T = len(tokens)

    def w(name):
        return torch.from_numpy(np.asarray(sd[name], dtype=np.float64)).to(dtype)

    def lin(x, pre, bias=False):
        return F.linear(x, w(pre + ".weight"), w(pre + ".bias") if bias else None)

    def rms(x, name):
        return w(name) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def swiglu(x, pre, g, u, d):
        if mutate == "gate_up_swapped":
            g, u = u, g
        return lin(F.silu(lin(x, pre + g)) * lin(x, pre + u), pre + d)

    cos, sin = (u.to(dtype) for u in _rope(T, D, theta))
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)

    def attention(x, p):
        a = p + "self_attn."
        q = lin(x, a + "q_proj", qkv_bias).view(T, H, D)
        k = lin(x, a + "k_proj", qkv_bias).view(T, Hkv, D)
        v = lin(x, a + "v_proj", qkv_bias).view(T, Hkv, D)
        if qk_norm and mutate != "qk_norm_after_rope":
            q, k = rms(q, a + "q_norm.weight"), rms(k, a + "k_norm.weight")
        q = q * cos[:, None] + _rotate_half(q) * sin[:, None]
        k = k * cos[:, None] + _rotate_half(k) * sin[:, None]
        if qk_norm and mutate == "qk_norm_after_rope":
            q, k = rms(q, a + "q_norm.weight"), rms(k, a + "k_norm.weight")
        k = k.repeat_interleave(H // Hkv, dim=1)  # repeat_kv: query head h uses h // (H/Hkv)
        v = v.repeat_interleave(H // Hkv, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) * D ** -0.5
        s = s.masked_fill(causal, float("-inf"))
        o = torch.einsum("hts,shd->thd", torch.softmax(s, dim=-1), v).reshape(T, H * D)
        return lin(o, a + "o_proj", o_bias)

    def sparse(x, p):
        if t == "mixtral":
            blk, E, k = p + "block_sparse_moe.", cfg["num_local_experts"], \
                cfg["num_experts_per_tok"]
            names, norm = ("w1", "w3", "w2"), True
        else:
            blk, E, k = p + "mlp.", cfg["num_experts"], cfg["num_experts_per_tok"]
            names, norm = ("gate_proj", "up_proj", "down_proj"), cfg.get("norm_topk_prob", False)
        if mutate == "norm_topk_flipped":
            norm = not norm
        router = lin(x, blk + "gate")  # (T, E)
        probs = torch.softmax(router, dim=-1)
        score = probs
        bias_name = blk + "gate.e_score_correction_bias"
        if bias_name in sd and mutate != "bias_ignored":
            score = probs + w(bias_name)
        top = torch.sort(score, dim=-1, descending=True)
        sel = top.indices[:, :k]  # (T, k)
        if trace is not None:
            p = probs.gather(1, top.indices)  # (T, E) in selection order
            gap = (top.values[:, :k, None] - top.values[:, None, k:]) / \
                (p[:, :k, None] + p[:, None, k:])  # (T, k, E-k): chosen i against unchosen j
            trace.setdefault("margins", []).append(float(gap.min()) if k < E else np.inf)
            trace.setdefault("chosen", []).append(sel)
            trace.setdefault("chosen_unbiased", []).append(probs.topk(k, dim=-1).indices)
            trace.setdefault("router", []).append(router)
        if mutate == "softmax_after_topk":
            wts = torch.softmax(router.gather(1, sel), dim=-1)
        else:
            wts = (score if mutate == "bias_in_weights" else probs).gather(1, sel)
        if norm and mutate != "softmax_after_topk":
            wts = wts / wts.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(E):
            rows, slot = torch.where(sel == e)
            if len(rows) == 0:
                continue
            src = (e + 1) % E if mutate == "experts_shifted" else e
            y = swiglu(x[rows], blk + "experts.%d." % src, *names)
            out.index_add_(0, rows, y * wts[rows, slot, None])
        if t == "qwen2_moe":
            sh = swiglu(x, blk + "shared_expert.", "gate_proj", "up_proj", "down_proj")
            if mutate != "shared_gate_dropped":
                sh = torch.sigmoid(lin(x, blk + "shared_expert_gate")) * sh
            out = out + sh
        return out

    x = w("model.embed_tokens.weight")[torch.tensor(tokens)]  # (T, C)
    for layer in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        x = x + attention(rms(x, p + "input_layernorm.weight"), p)
        h = rms(x, p + "post_attention_layernorm.weight")
        if is_sparse(cfg, layer):
            y = sparse(h, p)
        else:
            y = swiglu(h, p + "mlp.", "gate_proj", "up_proj", "down_proj")
        x = x + y
    h = rms(x, "model.norm.weight")
    tied = cfg.get("tie_word_embeddings", False)
    head = w("model.embed_tokens.weight" if tied else "lm_head.weight")
    return h @ head.t()
