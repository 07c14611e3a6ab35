"""Independent PyTorch check of `loom ckpt export` / `loom ckpt import`.

usage: hf_check.py LOOM_BIN CKPT_HF_HELPER

Export: ckpt_hf_helper makes random tiny loom checkpoints (GPT-2 tied/untied, Qwen2, Llama
with explicit head_dim), `loom ckpt export` writes them in HF naming (one file, shards,
bf16), and hf_models.py runs HF-style forwards (Conv1D GPT-2, Qwen2/Llama) on the exported
files read with hf_st.py; the logits must match loom's own forward on the checkpoint.
Import: Python writes random HF checkpoints (GPT-2 in Conv1D layout with the attention-mask
buffers, also under the "transformer." prefix; Qwen2 sharded with BF16/F16 tensors),
`loom ckpt import` converts them, and loom's logits on the result must match the Python
forward on the same HF files.

Tolerance: both sides compute in fp32 from bitwise-identical weights, so the only
differences are summation order (OpenBLAS vs torch GEMMs, softmax/norm reductions). With
hidden sizes <= 48 and 2 layers each logit is a short chain of dot products of <= 48 terms;
fp32 rounding gives relative errors of a few 1e-7, so max|diff| <= 1e-5 * max|logit| leaves
a ~10x margin while any layout mistake (a missing transpose, q/k/v order, rope convention,
wrong bias) changes logits by O(10%) or more.
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
import hf_models  # noqa: E402
import hf_st  # noqa: E402

TOL = 1e-5
TOKENS = [3, 17, 63, 0, 42, 42, 7, 64, 11, 5, 59, 23]
LOOM, HELPER = sys.argv[1], sys.argv[2]
failures = []


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        cmd = " ".join(map(str, args))
        raise RuntimeError("%s failed (%d): %s" % (cmd, r.returncode, r.stderr))
    return r.stderr


def loom_logits(ckpt, work):
    out = os.path.join(work, "logits.safetensors")
    run(HELPER, "logits", ckpt, out, ",".join(map(str, TOKENS)))
    return hf_st.read_file(out)[0]["logits"]


def compare(what, loom, want, V):
    """loom (T, Vp) against want (T, V); padding columns must be exactly zero."""
    want = want.detach().numpy()
    pad = np.abs(loom[:, V:]).max() if loom.shape[1] > V else 0.0
    err = np.abs(loom[:, :V] - want).max() / max(np.abs(want).max(), 1e-30)
    ok = err <= TOL and pad == 0.0 and loom.shape[0] == want.shape[0]
    print("%-40s rel err %.2e  padding max %.1e  %s" % (what, err, pad, "ok" if ok else "FAIL"))
    if not ok:
        failures.append(what)


def read_config(d):
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f)


GPT2 = ["model.preset=", "model.arch=gpt2", "model.max_seq=16", "model.vocab_size=70"]
LLAMA = ["model.preset=", "model.arch=llama", "model.max_seq=16", "model.vocab_size=70"]
EXPORT_CASES = [
    # name, overrides, extra export args, compare against re-import (bf16 weights)
    ("gpt2 tied f32", GPT2 + ["model.hidden=32", "model.heads=4", "model.layers=2"], [], False),
    ("gpt2 untied n_inner f32 sharded", GPT2 + ["model.hidden=24", "model.heads=2",
     "model.layers=2", "model.intermediate=40", "model.tied_embeddings=false"],
     ["--max-shard-size", "4KB"], False),
    ("qwen2 gqa bias tied f32 sharded", LLAMA + ["model.hidden=32", "model.heads=4",
     "model.kv_heads=2", "model.intermediate=48", "model.layers=2", "model.qkv_bias=true",
     "model.tied_embeddings=true", "model.rope_theta=1000000"],
     ["--max-shard-size", "10KB"], False),
    ("llama head_dim untied bf16 sharded", LLAMA + ["model.hidden=32", "model.heads=4",
     "model.kv_heads=1", "model.head_dim=12", "model.intermediate=40", "model.layers=2",
     "model.qkv_bias=false", "model.tied_embeddings=false"],
     ["--dtype", "bf16", "--max-shard-size", "8KB"], True),
]


def check_export(work):
    for i, (what, over, args, bf16) in enumerate(EXPORT_CASES):
        ck, hf = os.path.join(work, "ck%d" % i), os.path.join(work, "hf%d" % i)
        run(HELPER, "make", ck, 100 + i, *over)
        run(LOOM, "ckpt", "export", ck, "--out", hf, *args)
        sd, dtypes = hf_st.read_dir(hf)
        cfg = read_config(hf)
        if bf16 and set(dtypes.values()) != {"BF16"}:
            failures.append(what + ": dtypes %s" % set(dtypes.values()))
        sharded = os.path.exists(os.path.join(hf, "model.safetensors.index.json"))
        if sharded != ("--max-shard-size" in args):
            failures.append(what + ": sharded=%s" % sharded)
        ref = ck
        if bf16:  # loom's logits on the bf16 weights: import what was exported
            ref = os.path.join(work, "back%d" % i)
            run(LOOM, "ckpt", "import", hf, "--out", ref)
        compare("export: " + what, loom_logits(ref, work), hf_models.logits(sd, cfg, TOKENS),
                cfg["vocab_size"])


def write_config(d, cfg):
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)


def check_import(work):
    rng = np.random.default_rng(7)
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 70,
           "n_embd": 48, "n_layer": 2, "n_head": 4, "n_positions": 16, "n_inner": None,
           "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
           "tie_word_embeddings": True}
    sd = hf_models.random_gpt2(cfg, rng)
    want = hf_models.logits(sd, cfg, TOKENS)
    for prefix in ("", "transformer."):
        hf, ck = os.path.join(work, "gpt2_hf" + prefix), os.path.join(work, "gpt2_ck" + prefix)
        hf_st.write_dir(hf, {prefix + k: v for k, v in sd.items()})
        write_config(hf, cfg)
        err = run(LOOM, "ckpt", "import", hf, "--out", ck)
        if "ignored" not in err or "attn.bias" not in err:
            failures.append("import gpt2: no note about the mask buffers: %r" % err)
        compare("import: gpt2 conv1d + buffers %s" % (prefix or "(no prefix)"),
                loom_logits(ck, work), want, cfg["vocab_size"])

    cfg = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 70,
           "hidden_size": 32, "intermediate_size": 56, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
           "rope_theta": 1000000.0, "max_position_embeddings": 16, "hidden_act": "silu",
           "tie_word_embeddings": False, "use_sliding_window": False}
    sd = hf_models.random_qwen2(cfg, rng)
    dtypes = {k: ("BF16" if v.ndim == 2 else "F16") for k, v in sd.items()}
    hf, ck = os.path.join(work, "qwen2_hf"), os.path.join(work, "qwen2_ck")
    hf_st.write_dir(hf, sd, dtypes, shards=3)
    write_config(hf, cfg)
    stored, _ = hf_st.read_dir(hf)  # the rounded values actually in the files
    run(LOOM, "ckpt", "import", hf, "--out", ck)
    compare("import: qwen2 bf16/f16 3 shards", loom_logits(ck, work),
            hf_models.logits(stored, cfg, TOKENS), cfg["vocab_size"])


def main():
    work = tempfile.mkdtemp(prefix="hf_check_", dir=os.getcwd())
    try:
        check_export(work)
        check_import(work)
    except Exception as e:  # a failed command: report it as a failure, keep the work dir
        failures.append("error: %s" % e)
    if failures:
        print("FAILED (work dir %s):\n  %s" % (work, "\n  ".join(failures)))
        return 1
    shutil.rmtree(work)
    print("hf_check: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
