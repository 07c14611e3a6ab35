"""Forward passes over Hugging Face-named state dicts, written from the HF model definitions
(GPT2LMHeadModel with Conv1D layers; Qwen2ForCausalLM / LlamaForCausalLM), independent of
loom's naming: they read only HF names and config.json fields. Attention and RoPE math come
from tests/torch/ref_model.py (causal_attention, rope_tables, apply_rope).

Also random HF-named state dicts in those layouts, for the import direction."""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
from ref_model import apply_rope, causal_attention, rope_tables  # noqa: E402


def _t(sd, name):
    return torch.from_numpy(np.ascontiguousarray(sd[name], dtype=np.float32))


def gpt2_logits(sd, cfg, tokens):
    """GPT-2: Conv1D y = x @ W + b with W (in, out); c_attn packs q|k|v along out."""
    C, H = cfg["n_embd"], cfg["n_head"]
    D, eps = C // H, cfg.get("layer_norm_epsilon", 1e-5)
    T = len(tokens)
    tok = torch.tensor(tokens)

    def conv(h, pre):  # transformers.pytorch_utils.Conv1D
        return h @ _t(sd, pre + ".weight") + _t(sd, pre + ".bias")

    def ln(h, pre):
        return F.layer_norm(h, (C,), _t(sd, pre + ".weight"), _t(sd, pre + ".bias"), eps)

    x = _t(sd, "wte.weight")[tok] + _t(sd, "wpe.weight")[:T]
    x = x[None]  # (1, T, C)
    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        qkv = conv(ln(x, p + "ln_1"), p + "attn.c_attn")
        q, k, v = (u.reshape(1, T, H, D) for u in qkv.split(C, dim=-1))
        x = x + conv(causal_attention(q, k, v, H, H), p + "attn.c_proj")
        u = F.gelu(conv(ln(x, p + "ln_2"), p + "mlp.c_fc"), approximate="tanh")  # gelu_new
        x = x + conv(u, p + "mlp.c_proj")
    h = ln(x, "ln_f")
    tied = cfg.get("tie_word_embeddings", True)
    head = _t(sd, "wte.weight" if tied else "lm_head.weight")
    return (h @ head.t())[0]


def llama_logits(sd, cfg, tokens):
    """Llama / Qwen2: nn.Linear (out, in); RMSNorm; rotate_half RoPE; GQA; SwiGLU."""
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads", H)
    D = cfg.get("head_dim") or C // H
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    T = len(tokens)

    def lin(h, pre):
        b = pre + ".bias"
        return F.linear(h, _t(sd, pre + ".weight"), _t(sd, b) if b in sd else None)

    def rms(h, pre):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * _t(sd, pre + ".weight")

    cos, sin = rope_tables(T, D, theta, torch.float32)
    x = _t(sd, "model.embed_tokens.weight")[torch.tensor(tokens)][None]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = rms(x, p + "input_layernorm")
        q = apply_rope(lin(h, p + "self_attn.q_proj").reshape(1, T, H, D), cos, sin)
        k = apply_rope(lin(h, p + "self_attn.k_proj").reshape(1, T, Hkv, D), cos, sin)
        v = lin(h, p + "self_attn.v_proj").reshape(1, T, Hkv, D)
        x = x + lin(causal_attention(q, k, v, H, Hkv), p + "self_attn.o_proj")
        h = rms(x, p + "post_attention_layernorm")
        u = F.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj")
        x = x + lin(u, p + "mlp.down_proj")
    h = rms(x, "model.norm")
    tied = cfg.get("tie_word_embeddings", False)
    head = _t(sd, "model.embed_tokens.weight" if tied else "lm_head.weight")
    return (h @ head.t())[0]


def logits(sd, cfg, tokens):
    return (gpt2_logits if cfg["model_type"] == "gpt2" else llama_logits)(sd, cfg, tokens)


def random_gpt2(cfg, rng, buffers=True):
    """HF GPT-2 state dict (Conv1D layout (in, out)) plus the attention-mask buffers that
    older HF checkpoints carry (h.i.attn.bias (1,1,n,n) and h.i.attn.masked_bias)."""
    C, V, P, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"]
    I = cfg.get("n_inner") or 4 * C
    w = lambda *s: (0.2 * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    one = lambda n: (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)  # noqa: E731
    sd = {"wte.weight": w(V, C), "wpe.weight": w(P, C)}
    for i in range(L):
        p = "h.%d." % i
        sd.update({p + "ln_1.weight": one(C), p + "ln_1.bias": w(C),
                   p + "attn.c_attn.weight": w(C, 3 * C), p + "attn.c_attn.bias": w(3 * C),
                   p + "attn.c_proj.weight": w(C, C) / math.sqrt(2), p + "attn.c_proj.bias": w(C),
                   p + "ln_2.weight": one(C), p + "ln_2.bias": w(C),
                   p + "mlp.c_fc.weight": w(C, I), p + "mlp.c_fc.bias": w(I),
                   p + "mlp.c_proj.weight": w(I, C) / 2, p + "mlp.c_proj.bias": w(C)})
        if buffers:
            sd[p + "attn.bias"] = np.tril(np.ones((P, P), np.float32))[None, None]
            sd[p + "attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    sd["ln_f.weight"], sd["ln_f.bias"] = one(C), w(C)
    return sd


def random_qwen2(cfg, rng):
    """HF Qwen2 state dict (q/k/v biases; lm_head only when untied)."""
    C, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    H, Hkv, I = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    D = cfg.get("head_dim") or C // H
    w = lambda *s: (0.2 * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    one = lambda n: (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)  # noqa: E731
    sd = {"model.embed_tokens.weight": w(V, C)}
    for i in range(L):
        p = "model.layers.%d." % i
        a = p + "self_attn."
        sd.update({p + "input_layernorm.weight": one(C),
                   a + "q_proj.weight": w(H * D, C), a + "q_proj.bias": w(H * D),
                   a + "k_proj.weight": w(Hkv * D, C), a + "k_proj.bias": w(Hkv * D),
                   a + "v_proj.weight": w(Hkv * D, C), a + "v_proj.bias": w(Hkv * D),
                   a + "o_proj.weight": w(C, H * D),
                   p + "post_attention_layernorm.weight": one(C),
                   p + "mlp.gate_proj.weight": w(I, C), p + "mlp.up_proj.weight": w(I, C),
                   p + "mlp.down_proj.weight": w(C, I)})
    sd["model.norm.weight"] = one(C)
    if not cfg.get("tie_word_embeddings", False):
        sd["lm_head.weight"] = w(V, C)
    return sd
