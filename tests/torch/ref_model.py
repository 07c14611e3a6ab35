"""Independent PyTorch reference for loom's decoder models (GPT-2 and Llama/Qwen2 family).

Written plainly from the contract (include/loom/model.h names and shapes, include/loom/kernels.h
conventions), not from loom's C code:
  - parameters are a dict name -> tensor in loom's layout (linear weights (out, in));
  - forward gives logits (B, T, Vp) including the vocabulary padding columns;
  - the loss is cross-entropy over the first V columns, ignore_index -100;
  - bf16 mode rounds the inputs of every linear layer (q,k,v,o,up,gate,down, LM head) to bf16
    (and attention's operands as loom's bf16 flash attention does: BF16Attention)
    and accumulates in the working dtype (BF16Linear); everything else stays in that dtype;
  - train() runs S optimizer steps: A micro-batches, global-token-mean loss, clip_grad_norm_
    semantics, torch.optim.AdamW with two param groups (decay / no decay), lr schedule;
  - precision policy (param_dtype / optim_dtype bf16, docs/TRAINING.md "Precision"): the step's
    accumulated gradient is rounded to bf16 before the norm; AdamW runs in the working dtype on
    the stored (bf16) values, and then the parameters (param_dtype) and the moments exp_avg /
    exp_avg_sq (optim_dtype) are rounded to bf16: every value computed in fp32 from the stored
    ones and rounded once when stored, the rule of PyTorch's fused AdamW (torch >= 2.x;
    Debian's torch 1.13 has no fused=True, so the rule is applied around its fp32 AdamW).

Qwen3 and Mixture-of-Experts models (metadata qk_norm and moe_*; absent: a dense model without
q/k norms), from Hugging Face's Qwen3 / Qwen3-MoE / Qwen2-MoE definitions (ref_moe.py):
  - qk_norm: q_norm / k_norm, an RMSNorm (weight (D), the model's eps) of every head's q and k
    after the projections and before RoPE (Qwen3Attention);
  - MoE layers where layer not in mlp_only_layers and (layer+1) % decoder_sparse_step == 0
    (Qwen3MoeDecoderLayer): ref_moe.moe_block in place of the MLP on the MLP norm's output;
  - the objective of a micro-batch: cross-entropy + aux_coef * load_balancing_loss (HF: every
    MoE layer's router rows of the micro-batch pooled) + z_coef * sum over layers of
    Megatron's z-loss; in train() the CE is the step's global token mean and the two router
    terms are means over the step's micro-batches (each micro-batch's weighs 1/A); the logged
    loss is the CE alone;
  - auxiliary-loss-free balancing (DeepSeek-V3) when moe_bias_rate > 0: the router bias
    (layers.{l}.moe.router.bias) only shifts the scores experts are chosen by, is not trained,
    and after each optimizer step moves by -rate * sign(load_e - mean load), the loads being
    the selections of the step's micro-batches.

Works in float64 and float32 (dtype argument). torch 1.13: no scaled_dot_product_attention.
"""
import math
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F

import ref_moe

IGNORE_INDEX = -100

REQUIRED_META = [
    "arch", "vocab_size", "padded_vocab", "hidden", "layers", "heads", "kv_heads", "head_dim",
    "intermediate", "max_seq", "norm_eps", "rope_theta", "qkv_bias", "tied_embeddings", "B", "T",
    "grad_accum", "steps", "dtype", "lr", "min_lr_ratio", "lr_schedule", "warmup_steps",
    "weight_decay", "beta1", "beta2", "eps", "grad_clip", "decay_norms_and_biases",
    "activation_checkpointing",
]


def _bool(key, s):
    v = s.strip().lower()
    if v in ("true", "1"):
        return True
    if v in ("false", "0"):
        return False
    raise ValueError("metadata %s=%r is not a boolean (true/false)" % (key, s))


def _int(key, s):
    try:
        return int(s.strip())
    except ValueError:
        raise ValueError("metadata %s=%r is not an integer" % (key, s))


def _float(key, s):
    try:
        return float(s.strip())
    except ValueError:
        raise ValueError("metadata %s=%r is not a number" % (key, s))


class Spec:
    """Model dims and training hyper-parameters, parsed from the dump's string metadata."""

    @classmethod
    def from_metadata(cls, meta):
        missing = [k for k in REQUIRED_META if k not in meta]
        if missing:
            raise ValueError("metadata lacks: %s" % ", ".join(missing))
        s = cls()
        s.arch = meta["arch"].strip()
        if s.arch not in ("gpt2", "llama"):
            raise ValueError("metadata arch=%r, expected gpt2 or llama" % s.arch)
        for k, attr in [("vocab_size", "V"), ("padded_vocab", "Vp"), ("hidden", "C"),
                        ("layers", "L"), ("heads", "Hq"), ("kv_heads", "Hkv"), ("head_dim", "D"),
                        ("intermediate", "I"), ("max_seq", "max_seq"), ("B", "B"), ("T", "T"),
                        ("grad_accum", "A"), ("steps", "S"), ("warmup_steps", "warmup")]:
            setattr(s, attr, _int(k, meta[k]))
        for k in ["norm_eps", "rope_theta", "lr", "min_lr_ratio", "weight_decay", "beta1",
                  "beta2", "eps", "grad_clip"]:
            setattr(s, k, _float(k, meta[k]))
        for k in ["qkv_bias", "tied_embeddings", "decay_norms_and_biases",
                  "activation_checkpointing"]:
            setattr(s, k, _bool(k, meta[k]))
        s.dtype = meta["dtype"].strip()
        if s.dtype not in ("fp32", "bf16"):
            raise ValueError("metadata dtype=%r, expected fp32 or bf16" % s.dtype)
        for k in ("param_dtype", "optim_dtype"):  # the precision policy; absent: fp32
            v = meta.get(k, "fp32").strip()
            if v not in ("fp32", "bf16"):
                raise ValueError("metadata %s=%r, expected fp32 or bf16" % (k, v))
            setattr(s, k, v)
        s.lr_schedule = meta["lr_schedule"].strip()
        if s.lr_schedule not in ("constant", "linear", "cosine"):
            raise ValueError("metadata lr_schedule=%r, expected constant|linear|cosine"
                             % s.lr_schedule)
        # packed documents (data.pack_documents): the end-of-document token, absent = none
        s.doc_eod = _int("doc_eod", meta["doc_eod"]) if "doc_eod" in meta else -1
        # Qwen3 q/k norms and Mixture-of-Experts layers (absent: dense, no q/k norms)
        s.qk_norm = _bool("qk_norm", meta["qk_norm"]) if "qk_norm" in meta else False
        s.E = _int("moe_experts", meta.get("moe_experts", "0"))
        if s.E:
            for k, attr in [("moe_top_k", "k"), ("moe_intermediate", "Ie"),
                            ("moe_shared_intermediate", "Is"), ("moe_sparse_step", "sparse_step")]:
                setattr(s, attr, _int(k, meta[k]))
            for k, attr in [("moe_aux_coef", "aux_coef"), ("moe_z_coef", "z_coef"),
                            ("moe_capacity_factor", "capacity_factor"), ("moe_bias_rate", "bias_rate")]:
                setattr(s, attr, _float(k, meta[k]))
            s.norm_topk = _bool("moe_norm_topk", meta["moe_norm_topk"])
            s.drop_by_position = _bool("moe_drop_by_position", meta["moe_drop_by_position"])
            dense = meta.get("moe_mlp_only_layers", "").strip()
            s.mlp_only = set(_int("moe_mlp_only_layers", x) for x in dense.split(",") if x.strip())
        s.check()
        return s

    def is_moe(self, layer):
        """Hugging Face's rule (Qwen2MoeDecoderLayer, Qwen3MoeDecoderLayer)."""
        return (self.E > 0 and layer not in self.mlp_only
                and (layer + 1) % self.sparse_step == 0)

    @property
    def moe_layers(self):
        return [l for l in range(self.L) if self.is_moe(l)]

    def moe_cfg(self):
        """ref_moe.moe_block's configuration."""
        return dict(E=self.E, k=self.k, norm_topk=self.norm_topk,
                    capacity_factor=self.capacity_factor, drop_by_position=self.drop_by_position,
                    shared=self.Is > 0)

    def check(self):
        errs = []
        if not (self.Vp >= self.V > 0):
            errs.append("need padded_vocab %d >= vocab_size %d > 0" % (self.Vp, self.V))
        if self.Hkv <= 0 or self.Hq % self.Hkv:
            errs.append("kv_heads %d must divide heads %d" % (self.Hkv, self.Hq))
        if self.arch == "llama" and self.D % 2:
            errs.append("head_dim %d must be even for rope" % self.D)
        if self.T > self.max_seq:
            errs.append("T %d > max_seq %d" % (self.T, self.max_seq))
        for k in ("C", "L", "Hq", "D", "I", "B", "T", "A", "S"):
            if getattr(self, k) <= 0:
                errs.append("%s must be positive" % k)
        if self.warmup < 0:
            errs.append("warmup_steps %d < 0" % self.warmup)
        if errs:
            raise ValueError("; ".join(errs))

    @property
    def bf16(self):
        return self.dtype == "bf16"


def param_shapes(spec):
    """OrderedDict name -> shape, exactly the names of include/loom/model.h."""
    s = spec
    gpt2 = s.arch == "gpt2"
    p = OrderedDict()
    p["embed.weight"] = (s.Vp, s.C)
    if gpt2:
        p["pos_embed.weight"] = (s.max_seq, s.C)
    qd, kvd = s.Hq * s.D, s.Hkv * s.D
    for i in range(s.L):
        pre = "layers.%d." % i
        p[pre + "attn_norm.weight"] = (s.C,)
        if gpt2:
            p[pre + "attn_norm.bias"] = (s.C,)
        for nm, od in (("q", qd), ("k", kvd), ("v", kvd)):
            p[pre + "attn.%s.weight" % nm] = (od, s.C)
            if s.qkv_bias:
                p[pre + "attn.%s.bias" % nm] = (od,)
        if s.qk_norm:
            p[pre + "attn.q_norm.weight"] = (s.D,)
            p[pre + "attn.k_norm.weight"] = (s.D,)
        p[pre + "attn.o.weight"] = (s.C, qd)
        if gpt2:
            p[pre + "attn.o.bias"] = (s.C,)
        p[pre + "mlp_norm.weight"] = (s.C,)
        if s.is_moe(i):
            p[pre + "moe.router.weight"] = (s.E, s.C)
            if s.bias_rate > 0:
                p[pre + "moe.router.bias"] = (s.E,)
            for part, shp in (("gate", (s.Ie, s.C)), ("up", (s.Ie, s.C)), ("down", (s.C, s.Ie))):
                for e in range(s.E):
                    p[pre + "moe.experts.%d.%s.weight" % (e, part)] = shp
            if s.Is:
                p[pre + "moe.shared.gate.weight"] = (s.Is, s.C)
                p[pre + "moe.shared.up.weight"] = (s.Is, s.C)
                p[pre + "moe.shared.down.weight"] = (s.C, s.Is)
                p[pre + "moe.shared_gate.weight"] = (1, s.C)
        elif gpt2:
            p[pre + "mlp_norm.bias"] = (s.C,)
            p[pre + "mlp.up.weight"] = (s.I, s.C)
            p[pre + "mlp.up.bias"] = (s.I,)
            p[pre + "mlp.down.weight"] = (s.C, s.I)
            p[pre + "mlp.down.bias"] = (s.C,)
        else:
            p[pre + "mlp.gate.weight"] = (s.I, s.C)
            p[pre + "mlp.up.weight"] = (s.I, s.C)
            p[pre + "mlp.down.weight"] = (s.C, s.I)
    p["final_norm.weight"] = (s.C,)
    if gpt2:
        p["final_norm.bias"] = (s.C,)
    if not s.tied_embeddings:
        p["lm_head.weight"] = (s.Vp, s.C)
    return p


def decays(spec, name, shape):
    """Weight decay applies to 2-D weights (embed, pos_embed, lm_head, linear weights);
    norms and biases only when decay_norms_and_biases."""
    return len(shape) == 2 or spec.decay_norms_and_biases


def trained(name):
    """Every parameter but the MoE balancing bias (moved by the balancing rule, not AdamW)."""
    return not name.endswith(".moe.router.bias")


def lr_at(spec, step):
    """Learning rate of step `step` (from 0), in double precision."""
    lr, W, S, m = spec.lr, spec.warmup, spec.S, spec.min_lr_ratio
    if step < W:
        return lr * (step + 1) / W
    p = (step - W) / max(1, S - W)
    if spec.lr_schedule == "constant":
        return lr
    if spec.lr_schedule == "linear":
        return lr * (m + (1 - m) * (1 - p))
    return lr * (m + (1 - m) * 0.5 * (1 + math.cos(math.pi * p)))


def adam_max_step_factor(beta1, beta2, t):
    """Upper bound of |m_hat| / sqrt(v_hat) at AdamW step t (from 1), any gradient sequence
    (Cauchy-Schwarz on m_t = (1-b1) sum b1^(t-i) g_i against v_t = (1-b2) sum b2^(t-i) g_i^2).
    Used to bound how far a parameter whose gradient is pure rounding noise can drift."""
    r = beta1 * beta1 / beta2
    geo = sum(r ** j for j in range(t))
    return ((1 - beta1) / math.sqrt(1 - beta2) * math.sqrt(geo)
            * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t))


# ----------------------------------------------------------------------------------------------
# ops


def bf16_round(t):
    """Round to the nearest bf16 value (ties to even), returned in t's dtype."""
    return t.to(torch.bfloat16).to(t.dtype)


class BF16Linear(torch.autograd.Function):
    """y = round(x) @ round(W)^T + b with accumulation in x's dtype.
    Backward: dx = round(dy) @ round(W), dW = round(dy)^T @ round(x), db = dy.sum(0)."""

    @staticmethod
    def forward(ctx, x, w, b):
        xr, wr = bf16_round(x), bf16_round(w)
        ctx.save_for_backward(xr, wr)
        ctx.has_bias = b is not None
        y = xr @ wr.t()
        if b is not None:
            y = y + b
        return y

    @staticmethod
    def backward(ctx, dy):
        xr, wr = ctx.saved_tensors
        dyr = bf16_round(dy)
        dx = dyr @ wr
        dw = dyr.t() @ xr
        db = dy.sum(0) if ctx.has_bias else None
        return dx, dw, db


def linear(x, w, b, bf16):
    if not bf16:
        return F.linear(x, w, b)
    shp = x.shape
    y = BF16Linear.apply(x.reshape(-1, shp[-1]), w, b)
    return y.reshape(*shp[:-1], w.shape[0])


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(T, D, theta, dtype):
    """cos, sin (T, D) of the Hugging Face rotate_half convention; angles in float64."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin, variant=()):
    """x (B, T, H, D)."""
    if "rope_interleaved" in variant:  # deliberately wrong convention (selftest mutation)
        x2 = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
        h = x.shape[-1] // 2
        c = cos[:, :h].repeat_interleave(2, -1)
        s = sin[:, :h].repeat_interleave(2, -1)
        return x * c[None, :, None, :] + x2 * s[None, :, None, :]
    if cos.dim() == 3:  # per-row tables (B,T,D) of packed documents
        return x * cos[:, :, None, :] + rotate_half(x) * sin[:, :, None, :]
    return x * cos[None, :, None, :] + rotate_half(x) * sin[None, :, None, :]


def documents(tokens, eod):
    """Packed documents as Megatron-LM's get_ltor_masks_and_position_ids with
    reset_position_ids and reset_attention_mask: a document ends at each eod token (which
    belongs to it). Returns doc ids (B,T) (each row's documents numbered from 0) and positions
    (B,T) restarting at 0 per document, both long."""
    ends = (tokens == eod).long()
    doc = torch.cumsum(ends, dim=1) - ends  # tokens after the i-th eod are in document i
    B, T = tokens.shape
    pos = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        for t in range(1, T):
            pos[b, t] = 0 if doc[b, t] != doc[b, t - 1] else pos[b, t - 1] + 1
    return doc, pos


class BF16Attention(torch.autograd.Function):
    """Causal attention with loom's bf16 flash-attention roundings (src/kernels/flash_*_bf16.c),
    q (B,Hq,T,D), k/v (B,Hkv,T,D), accumulation in q's dtype:
    forward: s = round(q) round(k)^T / sqrt(D), m = row max, e = exp(s - m), l = sum e,
    out = round(e) round(v) / l (loom rounds exp(s - m_running) per 64-key tile: the same as m
    for T <= 64, as in these dumps), lse = m + log l;
    backward: dO' = round(dO), P = exp(s - lse), delta = rowsum(dO' out), dP = dO' round(v)^T,
    dS = P (dP - delta) / sqrt(D), dV = round(P)^T dO', dQ = round(dS) round(k),
    dK = round(dS)^T round(q) (dK, dV summed over the query heads of each kv head)."""

    @staticmethod
    def forward(ctx, q, k, v):
        B, Hq, T, D = q.shape
        rep = Hq // k.shape[1]
        scale = 1.0 / math.sqrt(D)
        qr = bf16_round(q)
        kr = bf16_round(k).repeat_interleave(rep, dim=1)
        vr = bf16_round(v).repeat_interleave(rep, dim=1)
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        s = ((qr @ kr.transpose(-1, -2)) * scale).masked_fill(mask, float("-inf"))
        m = s.amax(-1, keepdim=True)
        e = torch.exp(s - m)
        lsum = e.sum(-1, keepdim=True)
        out = (bf16_round(e) @ vr) / lsum
        ctx.save_for_backward(qr, kr, vr, s, m + torch.log(lsum), out)
        ctx.rep = rep
        return out

    @staticmethod
    def backward(ctx, dout):
        qr, kr, vr, s, lse, out = ctx.saved_tensors
        B, Hq, T, D = qr.shape
        scale = 1.0 / math.sqrt(D)
        dor = bf16_round(dout)
        p = torch.exp(s - lse)
        delta = (dor * out).sum(-1, keepdim=True)
        ds = p * (dor @ vr.transpose(-1, -2) - delta) * scale
        dsr = bf16_round(ds)
        dq = dsr @ kr
        dk = dsr.transpose(-1, -2) @ qr
        dv = bf16_round(p).transpose(-1, -2) @ dor
        rep = ctx.rep
        dk = dk.view(B, Hq // rep, rep, T, D).sum(2)
        dv = dv.view(B, Hq // rep, rep, T, D).sum(2)
        return dq, dk, dv


def causal_attention(q, k, v, Hq, Hkv, doc=None, bf16=False):
    """q (B,T,Hq,D), k/v (B,T,Hkv,D) -> (B,T,Hq*D). Query head h uses kv head h // (Hq/Hkv).
    doc (B,T): document ids; when given, the explicit block-diagonal causal mask lets a query
    see only the keys of its own document. bf16: loom's bf16 flash attention (BF16Attention;
    not combined with doc: no packed bf16 case is checked)."""
    assert not (bf16 and doc is not None), "packed documents with bf16 attention: no reference"
    B, T, _, D = q.shape
    rep = Hq // Hkv
    q = q.transpose(1, 2)
    if bf16:
        out = BF16Attention.apply(q, k.transpose(1, 2), v.transpose(1, 2))
        return out.transpose(1, 2).reshape(B, T, Hq * D)
    k = k.transpose(1, 2).repeat_interleave(rep, dim=1)
    v = v.transpose(1, 2).repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    if doc is not None:  # (B,1,T,T): masked where the key is in another document
        mask = mask[None] | (doc[:, :, None] != doc[:, None, :])
        mask = mask[:, None]
    scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = probs @ v
    return out.transpose(1, 2).reshape(B, T, Hq * D)


# ----------------------------------------------------------------------------------------------
# model


def moe_params(P, pre, spec):
    """ref_moe.moe_block's parameters of MoE layer `pre` (experts stacked (E, ...))."""
    Q = {"router": P[pre + "moe.router.weight"], "sel_bias": P.get(pre + "moe.router.bias")}
    for part in ("gate", "up", "down"):
        Q["experts_" + part] = torch.stack(
            [P[pre + "moe.experts.%d.%s.weight" % (e, part)] for e in range(spec.E)])
    if spec.Is:
        Q["shared_gate_proj"] = P[pre + "moe.shared.gate.weight"]
        Q["shared_up"] = P[pre + "moe.shared.up.weight"]
        Q["shared_down"] = P[pre + "moe.shared.down.weight"]
        Q["shared_expert_gate"] = P[pre + "moe.shared_gate.weight"]
    if Q["sel_bias"] is not None:
        Q["sel_bias"] = Q["sel_bias"].detach()
    return Q


def router_terms(spec, moe):
    """(load-balancing loss, z-loss) of one micro-batch from its MoE layers' router info (HF's
    load_balancing_loss_func with every layer pooled; Megatron's z-loss summed over layers)."""
    if not moe:
        return None, None
    aux = ref_moe.load_balancing_loss([m["probs"] for m in moe], [m["idx"] for m in moe], spec.E)
    z = sum(ref_moe.z_loss(m["logits"], 1.0) for m in moe)
    return aux, z


def forward(spec, P, tokens, bf16=False, variant=(), moe=None):
    """P: name -> tensor; tokens (B,T) long. Returns logits (B, T, Vp). moe (a list): receives
    each MoE layer's router info (ref_moe.moe_block's: logits, probs, idx, w, keep, ...)."""
    s = spec
    B, T = tokens.shape
    gpt2 = s.arch == "gpt2"
    dt = P["embed.weight"].dtype
    x = P["embed.weight"][tokens]
    doc = None
    if s.doc_eod >= 0:  # packed: positions restart per document, attention within one
        doc, pos = documents(tokens, s.doc_eod)
        if "pack_positions_not_reset" in variant:  # deliberately wrong (selftest mutation)
            pos = torch.arange(T).expand(B, T)
    if gpt2:
        x = x + (P["pos_embed.weight"][pos] if doc is not None else P["pos_embed.weight"][:T][None])
    else:
        cos, sin = rope_tables(T, s.D, s.rope_theta, dt)
        if doc is not None:  # per-row tables (B,T,D)
            cos, sin = cos[pos], sin[pos]

    def norm(h, pre):
        if gpt2:
            return F.layer_norm(h, (s.C,), P[pre + ".weight"], P[pre + ".bias"], s.norm_eps)
        return rms_norm(h, P[pre + ".weight"], s.norm_eps)

    def lin(h, pre):
        return linear(h, P[pre + ".weight"], P.get(pre + ".bias"), bf16)

    for i in range(s.L):
        pre = "layers.%d." % i
        h = norm(x, pre + "attn_norm")
        q = lin(h, pre + "attn.q").view(B, T, s.Hq, s.D)
        k = lin(h, pre + "attn.k").view(B, T, s.Hkv, s.D)
        v = lin(h, pre + "attn.v").view(B, T, s.Hkv, s.D)
        if s.qk_norm:  # Qwen3: per-head RMSNorm of q and k, before RoPE
            q = ref_moe.rms_norm(q, P[pre + "attn.q_norm.weight"], s.norm_eps)
            k = ref_moe.rms_norm(k, P[pre + "attn.k_norm.weight"], s.norm_eps)
        if not gpt2:
            q = apply_rope(q, cos, sin, variant)
            k = apply_rope(k, cos, sin, variant)
        a = causal_attention(q, k, v, s.Hq, s.Hkv, None if "pack_no_mask" in variant else doc, bf16)
        x = x + lin(a, pre + "attn.o")
        h = norm(x, pre + "mlp_norm")
        if s.is_moe(i):
            y, info = ref_moe.moe_block(h.reshape(B * T, s.C), moe_params(P, pre, s), s.moe_cfg(),
                                        bf16)
            if moe is not None:
                moe.append(info)
            x = x + y.view(B, T, s.C)
            continue
        if gpt2:
            u = lin(h, pre + "mlp.up")
            u = F.gelu(u) if "gelu_erf" in variant else F.gelu(u, approximate="tanh")
        else:
            u = F.silu(lin(h, pre + "mlp.gate")) * lin(h, pre + "mlp.up")
        x = x + lin(u, pre + "mlp.down")
    h = norm(x, "final_norm")
    head = P["embed.weight"] if s.tied_embeddings else P["lm_head.weight"]
    return linear(h, head, None, bf16)


def loss_sum(spec, logits, targets):
    """(sum of token cross-entropies over the first V columns, number of non-ignored targets)."""
    V = spec.V
    lg = logits[..., :V].reshape(-1, V)
    tg = targets.reshape(-1)
    total = F.cross_entropy(lg, tg, ignore_index=IGNORE_INDEX, reduction="sum")
    return total, int((tg != IGNORE_INDEX).sum())


def make_params(spec, params_np, dtype):
    """Leaf tensors (requires_grad) in `dtype` from numpy arrays keyed by model name."""
    return OrderedDict((n, torch.tensor(np.asarray(params_np[n]), dtype=dtype).requires_grad_(True))
                       for n in param_shapes(spec))


def _t(a):
    return torch.as_tensor(np.asarray(a, dtype=np.int64))


def forward_backward0(spec, params_np, tokens, targets, dtype, bf16=False, variant=()):
    """Step 0, micro-batch 0, initial params: logits, loss0 (token mean) and its gradients."""
    P = make_params(spec, params_np, dtype)
    moe = []
    logits = forward(spec, P, _t(tokens[0, 0]), bf16, variant, moe)
    tot, n = loss_sum(spec, logits, _t(targets[0, 0]))
    loss = tot / max(n, 1)  # the loss reported: the cross-entropy
    aux, z = router_terms(spec, moe)
    objective = loss if not moe else loss + spec.aux_coef * aux + spec.z_coef * z
    objective.backward()  # one micro-batch: its router terms with weight 1
    grads = OrderedDict((k, p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
                        for k, p in P.items())
    return logits.detach(), loss.detach(), grads


def bf16_truncate(t):
    """Round toward zero to bf16 (drop the low 16 bits): a wrong rounding, for sensitivity
    checks of the precision policy (variant "truncate")."""
    u = t.float().contiguous().view(torch.int32) & -65536
    return u.view(torch.float32).to(t.dtype)


def train(spec, params_np, tokens, targets, dtype, bf16=False, variant=()):
    """S optimizer steps. Returns dict: losses (S,), lrs (S,), grad_norms (S,), final params.
    variant "truncate": the precision policy's stores truncate instead of rounding."""
    store = bf16_truncate if "truncate" in variant else bf16_round
    s = spec
    P = make_params(spec, params_np, dtype)
    shapes = param_shapes(spec)
    decay = [p for n, p in P.items() if trained(n) and decays(s, n, shapes[n])]
    nodecay = [p for n, p in P.items() if trained(n) and not decays(s, n, shapes[n])]
    groups = [{"params": decay, "weight_decay": s.weight_decay}]
    if nodecay:
        groups.append({"params": nodecay, "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=s.lr, betas=(s.beta1, s.beta2), eps=s.eps,
                            weight_decay=s.weight_decay)
    losses, lrs, norms = [], [], []
    # cond[n][i] = min over steps of |g_i| / rms(g) over non-zero g_i (inf where always zero):
    # how small an element's gradient gets next to its tensor's; elements with tiny
    # gradients have updates set by rounding noise (Adam normalises each element).
    cond = OrderedDict((n, torch.full(p.shape, math.inf, dtype=torch.float64))
                       for n, p in P.items())
    aux_losses, z_losses, loads, dropped, gaps = [], [], [], [], []
    for step in range(s.S):
        lr = lr_at(s, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=False)
        for p in P.values():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        counts = [int((targets[step, a] != IGNORE_INDEX).sum()) for a in range(s.A)]
        total_n = sum(counts)
        step_loss = 0.0
        step_aux = step_z = 0.0
        step_load = np.zeros((len(s.moe_layers), max(s.E, 1)), dtype=np.int64)
        step_dropped = np.zeros(len(s.moe_layers), dtype=np.int64)
        for a in range(s.A):
            moe = []
            logits = forward(s, P, _t(tokens[step, a]), bf16, variant, moe)
            tot, n = loss_sum(s, logits, _t(targets[step, a]))
            if "micro_mean" in variant:  # deliberately wrong: mean of micro-batch means
                l = tot / max(n, 1) / s.A
            else:
                l = tot / max(total_n, 1)
            step_loss += float(l.detach())
            if moe:  # the router terms: means over the step's micro-batches
                aux, z = router_terms(s, moe)
                l = l + (s.aux_coef * aux + s.z_coef * z) / s.A
                step_aux += float(aux.detach()) / s.A
                step_z += float(z.detach()) / s.A
                for i, m in enumerate(moe):
                    step_load[i] += np.bincount(m["idx"].reshape(-1).numpy(), minlength=s.E)
                    step_dropped[i] += m["dropped"]
                    gaps.append(topk_gap(m, P.get("layers.%d.moe.router.bias" % s.moe_layers[i]), s.k))
            l.backward()
        losses.append(step_loss)
        aux_losses.append(step_aux)
        z_losses.append(step_z)
        loads.append(step_load)
        dropped.append(step_dropped)
        with torch.no_grad():
            if s.param_dtype == "bf16":  # the step's gradient is stored in bf16
                for p in P.values():
                    p.grad.copy_(store(p.grad))
            sq = sum(float((p.grad.double() ** 2).sum()) for p in P.values())
            norm = math.sqrt(sq)
            norms.append(norm)
            for n, p in P.items():
                g = p.grad.double().abs()
                rms = float(g.pow(2).mean().sqrt())
                if rms > 0:
                    r = torch.where(g > 0, g / rms, torch.full_like(g, math.inf))
                    cond[n] = torch.minimum(cond[n], r)
            if s.grad_clip > 0:
                coef = s.grad_clip / (norm + 1e-6)
                if coef < 1:
                    for p in P.values():
                        p.grad.mul_(coef)
        lrs.append(lr)
        opt.step()
        with torch.no_grad():
            for p in P.values():
                if s.param_dtype == "bf16":
                    p.copy_(store(p))
                if s.optim_dtype == "bf16":
                    for k in ("exp_avg", "exp_avg_sq"):
                        if k in opt.state[p]:  # (not the balancing bias: not trained)
                            opt.state[p][k].copy_(store(opt.state[p][k]))
            if s.E and s.bias_rate > 0:  # DeepSeek-V3's balancing, after the step
                # the bias is a float32 parameter, stepped in float32 (in a float64 run too)
                rate = torch.tensor(s.bias_rate, dtype=torch.float32)
                for i, l in enumerate(s.moe_layers):
                    b = P["layers.%d.moe.router.bias" % l]
                    load = torch.as_tensor(step_load[i])
                    sign = torch.sign(load * s.E - load.sum()).float()  # exact: integers
                    b.copy_((b.float() - rate * sign).to(dtype))
                    if s.param_dtype == "bf16":
                        b.copy_(store(b))
    final = OrderedDict((n, p.detach().clone()) for n, p in P.items())
    moments = OrderedDict()
    for n, p in P.items():
        for k in ("exp_avg", "exp_avg_sq"):
            st = opt.state[p].get(k)
            moments[k + "." + n] = (st if st is not None else torch.zeros_like(p)).detach().clone()
    out = {"losses": np.array(losses), "lrs": np.array(lrs), "grad_norms": np.array(norms),
           "final": final, "cond": cond, "moments": moments}
    if s.E:
        out.update(aux_losses=np.array(aux_losses), z_losses=np.array(z_losses),
                   loads=np.stack(loads), dropped=np.stack(dropped),
                   topk_gap=min(gaps) if gaps else math.inf)
    return out


def topk_gap(info, bias, k):
    """Smallest distance over a layer's rows between the k-th and (k+1)-th choosing score
    (probs + bias): how far fp32 rounding is from changing a selection."""
    sc = info["probs"].detach().double()
    if bias is not None:
        sc = sc + bias.detach().double()
    if sc.shape[1] <= k:
        return math.inf
    top = torch.sort(sc, dim=-1, descending=True).values
    return float((top[:, k - 1] - top[:, k]).min())


def run_all(spec, params_np, tokens, targets, dtype, bf16=False, variant=()):
    """Every quantity of a dump, as numpy arrays in the dump's naming (float64 arrays)."""
    logits, loss0, grads = forward_backward0(spec, params_np, tokens, targets, dtype, bf16,
                                             variant)
    tr = train(spec, params_np, tokens, targets, dtype, bf16, variant)
    out = OrderedDict()
    out["logits"] = logits.double().numpy()
    out["loss0"] = np.array([float(loss0)])
    for n, g in grads.items():
        out["grad." + n] = g.double().numpy()
    out["losses"] = tr["losses"]
    out["lrs"] = tr["lrs"]
    out["grad_norms"] = tr["grad_norms"]
    for k in ("aux_losses", "z_losses", "loads", "dropped", "topk_gap"):
        if k in tr:
            out[k] = tr[k]
    for n, p in tr["final"].items():
        out["final." + n] = p.double().numpy()
    for n, c in tr["cond"].items():
        out["cond." + n] = c.numpy()
    for n, m in tr["moments"].items():
        out[n] = m.double().numpy()
    return out
