#!/usr/bin/python3
"""Layout check of `loom ckpt export` for the vision-language models, independent of loom's
own name mapping: the parameters of a loom_vlm_dump are saved as a loom checkpoint, exported
with the loom binary, and the exported Hugging Face directory is loaded back BY HF NAME with
the semantics of the HF modules (Qwen2.5-VL: attn.qkv output rows split q, k, v as
Qwen2_5_VLVisionAttention does with reshape(seq, 3, heads, -1); patch_embed.proj a Conv3d
over pixel_values.view(-1, 3, T, p, p); merger.mlp.0/2 around the GELU; model.* as Qwen2.
LLaVA-style: CLIP encoder names, a Conv2d patch embedding over view(-1, 3, p, p), LLaVA's
projector names, language_model.*). The reference VLM of check_vlm.py then runs on those
parameters and must reproduce the logits loom computed on the original ones.

Checks, with their tolerances:
  - every exported tensor is consumed exactly once, every reference parameter is filled;
  - the convolution reading: conv3d/conv2d of the pixels with the exported weight equals
    the reference's linear over the flattened patch (float64, rel 1e-12: the same sums in
    another order);
  - every value comes back bitwise (fp32 export);
  - logits of the reference (float64) on the HF-loaded weights vs loom's fp32 logits: rel
    1e-5, and the gradient of every tensor: rel 1e-4 -- the tolerances of check_vlm.py (fp32
    reductions of a few hundred terms). The gradients matter: at the dump's initial scale the
    vision attention is nearly uniform, so the logits alone hardly see how q and k are read
    (swapping them moves the logits by ~1e-5), while the q/k gradients change completely;
  - the check can fail: the same comparison with q and k swapped in the qkv split, or with
    the patch kernel's rows and columns swapped, must miss by more than 1e-3.

usage: check_vlm_hf.py LOOM DUMP.safetensors WORKDIR"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402
from check_vision import rel  # noqa: E402
from check_vlm import forward  # noqa: E402

torch.set_num_threads(1)


class HF:
    """exported tensors by HF name, each to be taken exactly once"""

    def __init__(self, tensors):
        self.t = tensors
        self.used = set()

    def take(self, name):
        assert name in self.t, "exported checkpoint lacks %s" % name
        assert name not in self.used, "%s used twice" % name
        self.used.add(name)
        return torch.tensor(np.asarray(self.t[name]), dtype=torch.float64)

    def left(self):
        return sorted(set(self.t) - self.used)


def text_params(hf, P, prefix, head, tx, qkv_bias):
    P["embed.weight"] = hf.take(prefix + "embed_tokens.weight")
    for l in range(tx["L"]):
        a, b = prefix + "layers.%d." % l, "layers.%d." % l
        P[b + "attn_norm.weight"] = hf.take(a + "input_layernorm.weight")
        for n in "qkv":
            P[b + "attn.%s.weight" % n] = hf.take(a + "self_attn.%s_proj.weight" % n)
            if qkv_bias:
                P[b + "attn.%s.bias" % n] = hf.take(a + "self_attn.%s_proj.bias" % n)
        P[b + "attn.o.weight"] = hf.take(a + "self_attn.o_proj.weight")
        P[b + "mlp_norm.weight"] = hf.take(a + "post_attention_layernorm.weight")
        for n in ("gate", "up", "down"):
            P[b + "mlp.%s.weight" % n] = hf.take(a + "mlp.%s_proj.weight" % n)
    P["final_norm.weight"] = hf.take(prefix + "norm.weight")
    if not tx["tied"]:
        P["lm_head.weight"] = hf.take(head)


def conv_check(pixels, W):
    """the HF convolution over the patch values vs a linear over the flattened patch"""
    x = pixels.view(-1, *W.shape[1:])
    conv = (F.conv3d if W.dim() == 5 else F.conv2d)(x, W).reshape(x.shape[0], -1)
    return rel(pixels @ W.reshape(W.shape[0], -1).T, conv)


def qwen_params(hf, cfg, pixels, swap_qk=False, flip_patch=False):
    vc = cfg["vision_config"]
    Cv = vc["hidden_size"]
    P = {}
    W = hf.take("visual.patch_embed.proj.weight")
    assert list(W.shape) == [Cv, vc["in_chans"], vc["temporal_patch_size"], vc["patch_size"],
                             vc["patch_size"]], W.shape
    conv_err = conv_check(pixels, W)
    P["vision.patch_embed.weight"] = (W.transpose(-1, -2) if flip_patch else W).reshape(Cv, -1)
    for i in range(vc["depth"]):
        a, b = "visual.blocks.%d." % i, "vision.blocks.%d." % i
        P[b + "attn_norm.weight"] = hf.take(a + "norm1.weight")
        order = "kqv" if swap_qk else "qkv"
        for kind in ("weight", "bias"):
            qkv = hf.take(a + "attn.qkv." + kind)  # rows: (3, heads, D) as the HF module splits
            parts = qkv.reshape(3, Cv, *qkv.shape[1:])
            for j, n in enumerate(order):
                P[b + "attn.%s.%s" % (n, kind)] = parts[j]
        P[b + "attn.o.weight"] = hf.take(a + "attn.proj.weight")
        P[b + "attn.o.bias"] = hf.take(a + "attn.proj.bias")
        P[b + "mlp_norm.weight"] = hf.take(a + "norm2.weight")
        for n in ("gate", "up", "down"):
            for kind in ("weight", "bias"):
                P[b + "mlp.%s.%s" % (n, kind)] = hf.take(a + "mlp.%s_proj.%s" % (n, kind))
    P["vision.merger.norm.weight"] = hf.take("visual.merger.ln_q.weight")
    for j, n in ((0, "fc1"), (2, "fc2")):
        for kind in ("weight", "bias"):
            P["vision.merger.%s.%s" % (n, kind)] = hf.take("visual.merger.mlp.%d.%s" % (j, kind))
    tx = dict(L=cfg["num_hidden_layers"], Hq=cfg["num_attention_heads"],
              Hkv=cfg["num_key_value_heads"], V=cfg["vocab_size"], theta=cfg["rope_theta"],
              eps=cfg["rms_norm_eps"], sections=cfg["rope_scaling"]["mrope_section"],
              tied=cfg["tie_word_embeddings"])
    text_params(hf, P, "model.", "lm_head.weight", tx, True)
    vcfg = dict(heads=vc["num_heads"], window=vc["window_size"], patch=vc["patch_size"],
                merge=vc["spatial_merge_size"], full=vc["fullatt_block_indexes"],
                depth=vc["depth"], hidden=Cv, qwen=True)
    return P, tx, vcfg, conv_err


def llava_params(hf, cfg, pixels, swap_qk=False, flip_patch=False):
    vc, tc = cfg["vision_config"], cfg["text_config"]
    Cv = vc["hidden_size"]
    assert vc["class_token"] is False and vc["pre_layernorm"] is False
    assert vc["layer_norm_eps"] == 1e-5  # check_vision.llava_forward's epsilon
    P = {}
    E, V = "vision_tower.vision_model.embeddings.", "vision_tower.vision_model."
    W = hf.take(E + "patch_embedding.weight")
    assert list(W.shape) == [Cv, vc["num_channels"], vc["patch_size"], vc["patch_size"]], W.shape
    conv_err = conv_check(pixels, W)
    P["vision.patch_embed.weight"] = (W.transpose(-1, -2) if flip_patch else W).reshape(Cv, -1)
    P["vision.patch_embed.bias"] = hf.take(E + "patch_embedding.bias")
    P["vision.pos_embed.weight"] = hf.take(E + "position_embedding.weight")
    names = [("layer_norm1", "attn_norm"),
             ("self_attn.q_proj", "attn.k" if swap_qk else "attn.q"),
             ("self_attn.k_proj", "attn.q" if swap_qk else "attn.k"),
             ("self_attn.v_proj", "attn.v"),
             ("self_attn.out_proj", "attn.o"), ("layer_norm2", "mlp_norm"), ("mlp.fc1", "mlp.up"),
             ("mlp.fc2", "mlp.down")]
    for i in range(vc["num_hidden_layers"]):
        for h, n in names:
            for kind in ("weight", "bias"):
                P["vision.blocks.%d.%s.%s" % (i, n, kind)] = hf.take(
                    V + "encoder.layers.%d.%s.%s" % (i, h, kind))
    for kind in ("weight", "bias"):
        P["vision.post_norm." + kind] = hf.take(V + "feature_layernorm." + kind)
        P["vision.merger.fc1." + kind] = hf.take("multi_modal_projector.linear_1." + kind)
        P["vision.merger.fc2." + kind] = hf.take("multi_modal_projector.linear_2." + kind)
    tx = dict(L=tc["num_hidden_layers"], Hq=tc["num_attention_heads"],
              Hkv=tc["num_key_value_heads"], V=tc["vocab_size"], theta=tc["rope_theta"],
              eps=tc["rms_norm_eps"], sections=None, tied=tc["tie_word_embeddings"])
    text_params(hf, P, "language_model.model.", "language_model.lm_head.weight", tx,
                tc["model_type"] == "qwen2")
    vcfg = dict(heads=vc["num_attention_heads"], patch=vc["patch_size"], merge=1, full=[],
                depth=vc["num_hidden_layers"], hidden=Cv, qwen=False)
    return P, tx, vcfg, conv_err


def compare(P, tensors, tx, vcfg):
    """(logits rel error, worst gradient rel error and its tensor) against loom's dump"""
    P = {n: t.detach().clone().requires_grad_(True) for n, t in P.items()}
    logits, loss = forward(P, tensors, tx, vcfg)
    loss.backward()
    V = tx["V"]
    e = rel(np.asarray(tensors["logits"])[..., :V], logits.detach()[..., :V].numpy())
    worst = (0.0, "")
    for n, p in P.items():
        if n.startswith("vision.") and n.endswith("attn.k.bias") and not vcfg["qwen"]:
            continue  # no rotary: the exact gradient is 0 (see check_vision.py)
        g = np.asarray(tensors["grad." + n]).reshape(p.shape)
        worst = max(worst, (rel(g, p.grad.numpy()), n))
    return e, worst


def main():
    loom, dump, work = sys.argv[1:4]
    tensors, meta = st_io.read(dump)
    preset = meta["preset"]
    shutil.rmtree(work, ignore_errors=True)
    ck, out = os.path.join(work, "ckpt"), os.path.join(work, "hf")
    os.makedirs(ck)
    params = {n[6:]: np.asarray(a, dtype=np.float32) for n, a in tensors.items()
              if n.startswith("param.")}
    st_io.write(os.path.join(ck, "model.safetensors"), params, {"format": "loom"})
    with open(os.path.join(ck, "config.yaml"), "w") as f:
        f.write("model:\n  preset: %s\n" % preset)
    r = subprocess.run([loom, "ckpt", "export", ck, "--out", out], capture_output=True, text=True)
    if r.returncode:
        print("loom ckpt export failed:\n" + r.stderr)
        return 1
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    exported, _ = st_io.read(os.path.join(out, "model.safetensors"))
    pixels = torch.tensor(np.asarray(tensors["pixels"]), dtype=torch.float64)
    build = {"qwen2_5_vl": qwen_params, "loom_llava": llava_params}[cfg["model_type"]]
    fails = []

    hf = HF(exported)
    P, tx, vcfg, conv_err = build(hf, cfg, pixels)
    left, missing = hf.left(), sorted(set(params) - set(P))
    print("%s: %d exported tensors (%s), %d reference parameters" %
          (preset, len(exported), cfg["architectures"][0], len(P)))
    if left or missing:
        fails.append("unused exported tensors %s / unfilled parameters %s" % (left, missing))
    print("%-44s rel %.3e (tol 1e-12)" % ("convolution == flattened linear", conv_err))
    if not conv_err <= 1e-12:
        fails.append("convolution")
    differ = [n for n in params if n in P and not np.array_equal(
        P[n].numpy().astype(np.float32).reshape(params[n].shape), params[n])]
    print("%-44s %d of %d tensors differ" % ("values after export (bitwise)", len(differ), len(P)))
    if differ:
        fails.append("values of " + ", ".join(differ[:5]))
    e, (eg, worst) = compare(P, tensors, tx, vcfg)
    print("%-44s rel %.3e (tol 1e-5)" % ("logits from the HF-named weights", e))
    print("%-44s rel %.3e (tol 1e-4, worst %s)" % ("gradients of every tensor", eg, worst))
    if not e <= 1e-5 or not eg <= 1e-4:
        fails.append("logits/gradients")
    for what, kw in (("q and k swapped", dict(swap_qk=True)),
                     ("patch kernel transposed", dict(flip_patch=True))):
        Pw, txw, vw, _ = build(HF(exported), cfg, pixels, **kw)
        ew, (egw, _) = compare(Pw, tensors, txw, vw)
        print("%-44s logits rel %.3e, gradients %.3e (one must exceed 1e-3)" %
              ("wrong reading: " + what, ew, egw))
        if not max(ew, egw) > 1e-3:
            fails.append("the check cannot see " + what)
    if fails:
        print("FAILED: " + "; ".join(fails))
        return 1
    print("HF layout check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
