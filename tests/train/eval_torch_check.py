"""`loom eval` against an independent PyTorch computation of the same validation loss.

usage: eval_torch_check.py LOOM_BIN

For a GPT-2 (tied) and a Llama/Qwen2-style model (GQA, untied, qkv bias) trained a few steps
by loom and exported with `loom ckpt export`, `loom eval HF_DIR --data val.bin` (micro-batch 1,
so every window of the validation shard is scored) must give the token-mean cross-entropy
that PyTorch computes over the same windows: forwards of tests/ckpt/hf_models.py (HF-named
weights read from the exported files; attention and RoPE from tests/torch/ref_model.py) and
torch.nn.functional.cross_entropy, summed in float64 over all W*T target tokens.

Also: the run checkpoint itself and the HF directory give the same figures; a 2-rank
tensor-parallel and a 2-rank pipeline-parallel `loom eval` agree; the reported token count is
exactly W*T.

Tolerance: 1e-5 relative on the loss. Both sides compute in fp32 from bitwise-identical
weights; only summation orders differ (OpenBLAS vs torch GEMMs over <= 64 terms, softmax and
norm reductions), which perturbs each logit by a few 1e-7 relative and a per-token loss
(log-sum-exp minus one logit, O(1..10)) by ~1e-6 at most; the mean over thousands of tokens
averages those. 1e-5 leaves a margin of ~10x, while a wrong window, an off-by-one target, a
missing token or a mean of batch means instead of a token mean moves the loss by >= 1e-3.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ckpt"))
import hf_models  # noqa: E402
import hf_st  # noqa: E402

TOL = 1e-5
LOOM = sys.argv[1]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
failures = []


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=ENV)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(map(str, args)), r.returncode,
                                                   r.stderr[-2000:]))
    return r.stdout


def check(what, ok, detail):
    print("%s: %s (%s)" % ("ok" if ok else "FAIL", what, detail))
    if not ok:
        failures.append(what)


def read_shard(path):
    with open(path, "rb") as f:
        head = f.read(64)
        assert head[:8] == b"LOOMTOK1", path
        dtype = int.from_bytes(head[12:16], "little")
        n = int.from_bytes(head[16:24], "little")
        data = np.frombuffer(f.read(), dtype=np.uint16 if dtype == 1 else np.uint32)
    assert data.size == n
    return data.astype(np.int64)


def torch_loss(hf_dir, tokens, T):
    sd, _ = hf_st.read_dir(hf_dir)
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    W = (len(tokens) - 1) // T
    total = 0.0
    for w in range(W):
        window = tokens[w * T: w * T + T + 1]
        with torch.no_grad():
            logits = hf_models.logits(sd, cfg, [int(t) for t in window[:T]])
        tgt = torch.from_numpy(window[1:])
        total += float(F.cross_entropy(logits.double(), tgt, reduction="sum"))
    return total / (W * T), W * T


def loom_eval(ckpt, val, T, *extra):
    out = run(LOOM, "eval", ckpt, "--data", val, "--json", "training.micro_batch_size=1",
              "training.grad_accum=1", "training.seq_len=%d" % T, "training.eval_batches=0",
              *extra)
    return json.loads(out.strip().splitlines()[-1])


def case(name, work, model, T):
    runs = os.path.join(work, "runs")
    run(LOOM, "train", "data.train_shards=" + os.path.join(work, "train.bin"), "run.name=" + name,
        "run.output_dir=" + runs, "training.steps=3", "training.warmup_steps=1",
        "training.micro_batch_size=4", "training.seq_len=%d" % T, "training.lr=3e-3", "--quiet",
        *model)
    ckpt = [os.path.join(runs, d) for d in os.listdir(runs) if d.startswith(name + "_")][0]
    ckpt = os.path.join(ckpt, "final_checkpoint")
    hf = os.path.join(work, name + "_hf")
    run(LOOM, "ckpt", "export", ckpt, "--out", hf)
    val = os.path.join(work, "val.bin")
    tokens = read_shard(val)
    want, count = torch_loss(hf, tokens, T)
    got = loom_eval(hf, val, T)
    rel = abs(got["val_loss"] - want) / want
    check(name + ": loom eval of the HF export = PyTorch token-mean cross-entropy", rel <= TOL,
          "loom %.9f torch %.9f rel %.2e tol %g" % (got["val_loss"], want, rel, TOL))
    check(name + ": target tokens counted", got["tokens"] == count,
          "loom %d, all %d windows x T = %d" % (got["tokens"], count // T, count))
    check(name + ": perplexity = exp(val loss)",
          abs(got["val_perplexity"] - np.exp(got["val_loss"])) <= 1e-12 * got["val_perplexity"],
          "%.12g vs %.12g" % (got["val_perplexity"], np.exp(got["val_loss"])))
    own = loom_eval(ckpt, val, T)
    rel = abs(own["val_loss"] - got["val_loss"]) / got["val_loss"]
    check(name + ": the run checkpoint scores as its HF export", rel <= 1e-7,
          "%.12g vs %.12g rel %.2e" % (own["val_loss"], got["val_loss"], rel))
    for layout in (["parallel.tp=2"], ["parallel.pp=2"]):
        par = loom_eval(hf, val, T, "--nproc", "2", *layout)
        rel = abs(par["val_loss"] - want) / want
        check("%s: 2 ranks %s = PyTorch" % (name, layout[0]), rel <= TOL and par["tokens"] == count,
              "loom %.9f rel %.2e, %d tokens" % (par["val_loss"], rel, par["tokens"]))


def main():
    work = tempfile.mkdtemp(prefix="loom-eval-torch.")
    try:
        run(LOOM, "data", "synth-text", "--out", os.path.join(work, "train.txt"), "--bytes",
            "60000", "--seed", "3")
        run(LOOM, "data", "synth-text", "--out", os.path.join(work, "val.txt"), "--bytes",
            "6000", "--seed", "11")
        tok = os.path.join(work, "tok.json")
        run(LOOM, "data", "train-tokenizer", "--vocab-size", "300", "--out", tok,
            os.path.join(work, "train.txt"))
        for part in ("train", "val"):
            run(LOOM, "data", "tokenize", "--tokenizer", tok, "--out",
                os.path.join(work, part + ".bin"), os.path.join(work, part + ".txt"))
        case("gpt2", work, ["model.preset=tiny-gpt2", "model.vocab_size=300", "model.layers=2",
                            "model.hidden=64", "model.intermediate=128"], 32)
        case("qwen2", work, ["model.preset=tiny-llama", "model.vocab_size=300",
                             "model.layers=2", "model.hidden=64", "model.heads=4",
                             "model.kv_heads=2", "model.intermediate=96",
                             "model.qkv_bias=true", "model.tied_embeddings=false"], 24)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("%d check(s) failed: %s" % (len(failures), ", ".join(failures)))
        sys.exit(1)
    print("all checks passed")


main()
