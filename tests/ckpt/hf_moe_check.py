"""Independent check of `loom ckpt export` / `import` for Qwen3, Qwen3-MoE, Qwen2-MoE and
Mixtral, written from transformers' module structure (modeling_qwen3.py,
modeling_qwen3_moe.py, modeling_qwen2_moe.py, modeling_mixtral.py; conversion_mapping.py for
the v5 fused experts), not from loom's code.

usage: hf_moe_check.py LOOM_BIN CKPT_HF_HELPER

1. Export: ckpt_hf_helper writes random loom checkpoints; the exported directory must hold
   exactly the tensors (names and shapes) the HF class builds from the exported config.json
   (expected_tensors below, from the modules' __init__), each equal bitwise to the loom
   tensor it comes from (loom_to_hf: loom's names, include/loom/model.h).
2. Fused v5 layout: the exported per-expert tensors rewritten as transformers v5 keeps them
   (mlp.experts.gate_up_proj [E, 2I, H] = per expert cat(gate_proj, up_proj) on dim 0, stacked;
   mlp.experts.down_proj [E, H, I]; Mixtral under mlp.* too) import to the same loom checkpoint
   as the per-expert files; a layer given both ways, or a fused tensor of the wrong rank, is
   refused.
3. Import: a random HF Qwen2-MoE directory written here (BF16, sharded, a dense layer, qkv
   biases, shared expert) imports to loom tensors equal to the HF ones under loom_to_hf.

No tolerance: every comparison is bitwise (values are only copied).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_st  # noqa: E402

LOOM, HELPER = sys.argv[1], sys.argv[2]
failures = []


def run(*args, ok=True):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(map(str, args)), r.returncode,
                                                    r.stderr))
    return r


def check(cond, what):
    print("%-70s %s" % (what, "ok" if cond else "FAIL"))
    if not cond:
        failures.append(what)


# ---- what transformers builds from a config.json ------------------------------------------

def is_moe_layer(cfg, l):
    t = cfg["model_type"]
    if t == "mixtral":
        return True
    if t not in ("qwen3_moe", "qwen2_moe"):
        return False
    # Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer.__init__
    return (l not in (cfg.get("mlp_only_layers") or [])) and cfg["num_experts"] > 0 and \
        (l + 1) % cfg.get("decoder_sparse_step", 1) == 0


def head_dim(cfg):
    t = cfg["model_type"]
    if t == "qwen3":  # Qwen3Config(head_dim=128)
        return cfg.get("head_dim", 128)
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def expected_tensors(cfg):
    """name -> shape of every parameter of <Class>ForCausalLM (persistent, per-expert 4.x)."""
    t, H, V = cfg["model_type"], cfg["hidden_size"], cfg["vocab_size"]
    nh = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or nh
    D = head_dim(cfg)
    out = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = (V, H)
    qkv_bias = cfg.get("qkv_bias", True) if t == "qwen2_moe" else \
        cfg.get("attention_bias", False)
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        out[p + "input_layernorm.weight"] = (H,)
        out[p + "post_attention_layernorm.weight"] = (H,)
        for n, rows in (("q", nh * D), ("k", kv * D), ("v", kv * D)):
            out[p + "self_attn.%s_proj.weight" % n] = (rows, H)
            if qkv_bias:
                out[p + "self_attn.%s_proj.bias" % n] = (rows,)
        out[p + "self_attn.o_proj.weight"] = (H, nh * D)
        if t in ("qwen3", "qwen3_moe"):  # Qwen3Attention: q_norm/k_norm over head_dim
            out[p + "self_attn.q_norm.weight"] = (D,)
            out[p + "self_attn.k_norm.weight"] = (D,)
        if not is_moe_layer(cfg, l):
            I = cfg["intermediate_size"]
            for n in ("gate", "up"):
                out[p + "mlp.%s_proj.weight" % n] = (I, H)
            out[p + "mlp.down_proj.weight"] = (H, I)
        elif t == "mixtral":  # MixtralSparseMoeBlock: gate, experts[e].w1/w2/w3
            E, I = cfg["num_local_experts"], cfg["intermediate_size"]
            out[p + "block_sparse_moe.gate.weight"] = (E, H)
            for e in range(E):
                q = p + "block_sparse_moe.experts.%d." % e
                out[q + "w1.weight"], out[q + "w3.weight"], out[q + "w2.weight"] = \
                    (I, H), (I, H), (H, I)
        else:  # Qwen{2,3}MoeSparseMoeBlock
            E, I = cfg["num_experts"], cfg["moe_intermediate_size"]
            out[p + "mlp.gate.weight"] = (E, H)
            for e in range(E):
                q = p + "mlp.experts.%d." % e
                out[q + "gate_proj.weight"], out[q + "up_proj.weight"] = (I, H), (I, H)
                out[q + "down_proj.weight"] = (H, I)
            if t == "qwen2_moe":
                S = cfg["shared_expert_intermediate_size"]
                out[p + "mlp.shared_expert.gate_proj.weight"] = (S, H)
                out[p + "mlp.shared_expert.up_proj.weight"] = (S, H)
                out[p + "mlp.shared_expert.down_proj.weight"] = (H, S)
                out[p + "mlp.shared_expert_gate.weight"] = (1, H)
    return out


def loom_to_hf(name, cfg):
    """loom tensor name -> HF name (include/loom/model.h's names)."""
    mixtral = cfg["model_type"] == "mixtral"
    if name == "embed.weight":
        return "model.embed_tokens.weight"
    if name == "final_norm.weight":
        return "model.norm.weight"
    if name == "lm_head.weight":
        return "lm_head.weight"
    parts = name.split(".")
    l, rest = parts[1], parts[2:]
    p = "model.layers.%s." % l
    simple = {"attn_norm.weight": "input_layernorm.weight",
              "mlp_norm.weight": "post_attention_layernorm.weight",
              "attn.q_norm.weight": "self_attn.q_norm.weight",
              "attn.k_norm.weight": "self_attn.k_norm.weight",
              "moe.router.weight": ("block_sparse_moe" if mixtral else "mlp") + ".gate.weight",
              # DeepSeek-V3's name for the selection-only balancing bias (no HF Qwen class has
              # one: loom's addition, kept so that it survives the round trip)
              "moe.router.bias": ("block_sparse_moe" if mixtral else "mlp") +
              ".gate.e_score_correction_bias",
              "moe.shared_gate.weight": "mlp.shared_expert_gate.weight"}
    r = ".".join(rest)
    if r in simple:
        return p + simple[r]
    if rest[0] == "attn":  # attn.q.weight -> self_attn.q_proj.weight
        return p + "self_attn.%s_proj.%s" % (rest[1], rest[2])
    if rest[0] == "mlp":
        return p + "mlp.%s_proj.weight" % rest[1]
    if rest[:2] == ["moe", "shared"]:
        return p + "mlp.shared_expert.%s_proj.weight" % rest[2]
    if rest[:2] == ["moe", "experts"]:
        e, kind = rest[2], rest[3]
        if mixtral:
            return p + "block_sparse_moe.experts.%s.%s.weight" % (
                e, {"gate": "w1", "up": "w3", "down": "w2"}[kind])
        return p + "mlp.experts.%s.%s_proj.weight" % (e, kind)
    raise KeyError(name)


def read_json(path):
    with open(path) as f:
        return json.load(f)


# ---- 1. export ------------------------------------------------------------------------------

TINY = ["model.vocab_size=100", "model.max_seq=16"]
CASES = [
    ("qwen3", ["model.preset=tiny-qwen3", "model.layers=2"] + TINY, []),
    ("qwen3_moe", ["model.preset=tiny-qwen3-moe", "model.layers=3",
                   "model.moe.mlp_only_layers=1", "model.moe.experts=5", "model.moe.top_k=3"]
     + TINY, ["--max-shard-size", "30KB"]),
    ("qwen3_moe_bias", ["model.preset=tiny-qwen3-moe", "model.layers=2",
                        "model.moe.bias_update_rate=0.01"] + TINY, []),
    ("qwen2_moe", ["model.preset=tiny-qwen2-moe", "model.layers=2", "model.moe.sparse_step=2",
                   "model.tied_embeddings=true"] + TINY, ["--dtype", "bf16"]),
    ("mixtral", ["model.preset=", "model.arch=llama", "model.vocab_size=90", "model.hidden=32",
                 "model.heads=4", "model.kv_heads=2", "model.layers=2", "model.intermediate=24",
                 "model.max_seq=16", "model.moe.experts=4", "model.moe.top_k=2",
                 "model.moe.intermediate=24", "model.moe.norm_topk=true",
                 "model.moe.sparse_step=1"], []),
]


def bf16_round(a):
    return (hf_st.bf16_bits(a).astype(np.uint32) << 16).view(np.float32)


def check_export(work):
    dirs = {}
    for i, (name, over, args) in enumerate(CASES):
        ck, hf = os.path.join(work, name + "_ck"), os.path.join(work, name + "_hf")
        run(HELPER, "flat", ck, 10 + i, *over)
        run(LOOM, "ckpt", "export", ck, "--out", hf, *args)
        cfg = read_json(os.path.join(hf, "config.json"))
        sd, dtypes = hf_st.read_dir(hf)
        want = expected_tensors(cfg)
        loom, _ = hf_st.read_file(os.path.join(ck, "model.safetensors"))
        for k in loom:  # the balancing bias, where the model has one: (E,) beside the router
            if k.endswith(".moe.router.bias"):
                want[loom_to_hf(k, cfg)] = (cfg["num_experts"],)
        check(cfg["model_type"] == name.replace("_bias", ""),
              "export %s: model_type %s" % (name, cfg["model_type"]))
        check(set(sd) == set(want), "export %s: tensor names as the HF class (%d; missing %s, "
              "extra %s)" % (name, len(want), sorted(set(want) - set(sd))[:3],
                             sorted(set(sd) - set(want))[:3]))
        check(all(tuple(sd[k].shape) == want[k] for k in sd if k in want),
              "export %s: tensor shapes as the HF class" % name)
        same = True
        for k, v in loom.items():
            h = loom_to_hf(k, cfg)
            if k in ("embed.weight", "lm_head.weight"):
                v = v[:cfg["vocab_size"]]
            if "bf16" in args:
                v = bf16_round(v)
            same &= h in sd and np.array_equal(sd[h], v)
        check(same and len(loom) == len(sd), "export %s: every loom tensor, bitwise" % name)
        dirs[name] = (ck, hf, cfg)
    return dirs


# ---- 2. the fused v5 layout ------------------------------------------------------------------

def fuse(sd, cfg):
    """transformers v5's layout of the per-expert tensors (conversion_mapping.py: qwen2_moe /
    qwen3_moe MergeModulelist(dim=0) + Concatenate(dim=1); mixtral the same from w1/w3/w2 and
    block_sparse_moe.gate renamed mlp.gate)."""
    mixtral = cfg["model_type"] == "mixtral"
    E = cfg["num_local_experts"] if mixtral else cfg["num_experts"]
    blk = "block_sparse_moe" if mixtral else "mlp"
    g, u, d = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
    out = {k: v for k, v in sd.items() if ".experts." not in k}
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        if not is_moe_layer(cfg, l):
            continue
        ex = p + blk + ".experts.%d.%s.weight"
        out[p + "mlp.experts.gate_up_proj"] = np.stack(
            [np.concatenate([sd[ex % (e, g)], sd[ex % (e, u)]], 0) for e in range(E)])
        out[p + "mlp.experts.down_proj"] = np.stack([sd[ex % (e, d)] for e in range(E)])
        if mixtral:
            out[p + "mlp.gate.weight"] = out.pop(p + "block_sparse_moe.gate.weight")
    return out


def loom_tensors(ck):
    return hf_st.read_file(os.path.join(ck, "model.safetensors"))[0]


def same_tensors(a, b):
    return set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


def check_fused(work, dirs):
    for name in ("qwen3_moe", "qwen2_moe", "mixtral"):
        ck, hf, cfg = dirs[name]
        sd, dtypes = hf_st.read_dir(hf)
        per = os.path.join(work, name + "_per")
        run(LOOM, "ckpt", "import", hf, "--out", per)
        fused = fuse(sd, cfg)
        check(any(k.endswith("experts.gate_up_proj") for k in fused) and
              all(v.ndim == 3 for k, v in fused.items() if ".experts." in k),
              "fused %s: [E, 2I, H] and [E, H, I] tensors written" % name)
        for shards, dt in ((1, "F32"), (3, "BF16")):
            v5, out = os.path.join(work, "%s_v5_%d" % (name, shards)), \
                os.path.join(work, "%s_v5back_%d" % (name, shards))
            hf_st.write_dir(v5, fused, {k: dt for k in fused}, shards=shards)
            shutil.copy(os.path.join(hf, "config.json"), v5)
            run(LOOM, "ckpt", "import", v5, "--out", out)
            want = loom_tensors(per)
            if dt == "BF16":
                want = {k: bf16_round(v) for k, v in want.items()}
            check(same_tensors(loom_tensors(out), want),
                  "fused %s (%d file%s, %s): import equals the per-expert import" %
                  (name, shards, "s" if shards > 1 else "", dt))
    # refusals: a layer given both ways; a fused tensor of the wrong rank
    ck, hf, cfg = dirs["qwen3_moe"]
    sd, _ = hf_st.read_dir(hf)
    both = dict(sd)
    both.update({k: v for k, v in fuse(sd, cfg).items() if k.startswith("model.layers.0.mlp.exp")})
    bad = os.path.join(work, "both")
    hf_st.write_dir(bad, both)
    shutil.copy(os.path.join(hf, "config.json"), bad)
    r = run(LOOM, "ckpt", "import", bad, "--out", os.path.join(work, "both_out"), ok=False)
    check(r.returncode == 1 and "is there twice" in r.stderr and "mlp.experts." in r.stderr,
          "fused and per-expert for one layer refused: %s" % r.stderr.strip()[-120:])
    flat = fuse(sd, cfg)
    k = "model.layers.0.mlp.experts.down_proj"
    flat[k] = flat[k].reshape(flat[k].shape[0], -1)
    bad = os.path.join(work, "rank2")
    hf_st.write_dir(bad, flat)
    shutil.copy(os.path.join(hf, "config.json"), bad)
    r = run(LOOM, "ckpt", "import", bad, "--out", os.path.join(work, "rank2_out"), ok=False)
    check(r.returncode == 1 and k in r.stderr and "fused expert layout" in r.stderr,
          "fused tensor of rank 2 refused: %s" % r.stderr.strip()[-120:])


# ---- 3. import of an HF directory written here -------------------------------------------------

def check_import(work):
    cfg = {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
           "vocab_size": 70, "hidden_size": 32, "intermediate_size": 40,
           "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
           "hidden_act": "silu", "tie_word_embeddings": False, "use_sliding_window": False,
           "sliding_window": 4096, "max_window_layers": 28, "decoder_sparse_step": 1,
           "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24,
           "num_experts_per_tok": 3, "num_experts": 6, "norm_topk_prob": False,
           "output_router_logits": False, "router_aux_loss_coef": 0.001,
           "mlp_only_layers": [0], "torch_dtype": "bfloat16"}
    rng = np.random.default_rng(5)
    sd = {k: rng.standard_normal(s).astype(np.float32)
          for k, s in expected_tensors(cfg).items()}
    hf, ck = os.path.join(work, "py_qwen2_moe"), os.path.join(work, "py_qwen2_moe_ck")
    hf_st.write_dir(hf, sd, {k: "BF16" for k in sd}, shards=4)
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(cfg, f)
    stored, _ = hf_st.read_dir(hf)
    r = run(LOOM, "ckpt", "import", hf, "--out", ck)
    check("output_router_logits is false" in r.stderr,
          "import: the note about the auxiliary loss HF would not train with")
    loom = loom_tensors(ck)
    same = len(loom) == len(stored)
    for k, v in loom.items():
        h = loom_to_hf(k, cfg)
        if k in ("embed.weight", "lm_head.weight"):
            same &= not v[cfg["vocab_size"]:].any()
            v = v[:cfg["vocab_size"]]
        same &= h in stored and np.array_equal(stored[h], v)
    check(same, "import: Python-written qwen2_moe (BF16, 4 shards, dense layer 0) bitwise")
    with open(os.path.join(ck, "config.yaml")) as f:
        y = f.read()
    for key in ("experts: 6", "top_k: 3", "shared_intermediate: 24", "norm_topk: \"false\"",
                "mlp_only_layers: \"0\"", "aux_loss_coef: 0.0", "qkv_bias: \"true\""):
        check(key in y, "import: config.yaml has %s" % key)


def main():
    work = tempfile.mkdtemp(prefix="hf_moe_check_", dir=os.getcwd())
    try:
        dirs = check_export(work)
        check_fused(work, dirs)
        check_import(work)
    except Exception as e:  # a failed command: report it as a failure, keep the work dir
        failures.append("error: %s" % e)
    if failures:
        print("FAILED (work dir %s):\n  %s" % (work, "\n  ".join(failures)))
        return 1
    shutil.rmtree(work)
    print("hf_moe_check: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
