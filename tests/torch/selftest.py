#!/usr/bin/python3
"""Self-test of the PyTorch reference checker (no loom binary needed).

For several configs it builds random parameters and data, produces a dump in exactly the
loom_refdump format with the reference itself (fp32 dumps from torch float32, i.e. an honest fp32
implementation; bf16 dumps from the emulated-bf16 model run in float64, so the checker's float32
emulation faces different rounding), writes it with st_io, and then:
  - the checker must pass it;
  - copies with one gradient tensor scaled by 1+1e-3, one gradient element moved by 1e-3 of its
    tensor's norm, loss0, a later loss, a final parameter tensor, a logit or an lr perturbed
    must fail (bf16 dumps: perturbations 10x the bf16 tolerances);
  - dumps made by deliberately wrong model variants (GELU erf instead of tanh, interleaved RoPE,
    loss as a mean of micro-batch means, a "bf16" dump computed without any bf16 rounding, a
    precision-policy dump whose stores truncate, or one computed with fp32 storage, packed
    documents whose positions do not restart (GPT-2's learned table; with rotary positions and
    per-document masks a constant shift of a document's positions changes no score, so Llama
    cannot tell) or whose attention crosses documents) must fail;
  - precision-policy dumps with one stored parameter or moment off the bf16 grid must fail;
  - the command line (check_refdump.py FILE) exits 0 on a good dump and 2 on a truncated one;
  - st_io round-trips and rejects corrupt headers.
Usage: /usr/bin/python3 tests/torch/selftest.py [--keep DIR] [--verbose] [--threads N]
(default 1 torch thread: these matrices are tiny, and with 2 OpenMP threads on a loaded 2-core
machine the same work took 10-100x longer, spinning.)
"""
import argparse
import copy
import io
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st_io  # noqa: E402
import ref_model as rm  # noqa: E402
import check_refdump as ck  # noqa: E402

BASE = dict(norm_eps="1e-05", rope_theta="10000.0", B="2", T="33", grad_accum="2", steps="4",
            lr="0.003", min_lr_ratio="0.1", lr_schedule="cosine", warmup_steps="1",
            weight_decay="0.1", beta1="0.9", beta2="0.95", eps="1e-08", grad_clip="1.0",
            decay_norms_and_biases="false", activation_checkpointing="false",
            vocab_size="1000", padded_vocab="1024", hidden="96", max_seq="40", layers="2")

CONFIGS = {
    # GPT-2, tied embeddings, 3 heads of 32, odd sizes; clipping active (norm > 1 early).
    "gpt2_tied_fp32": dict(arch="gpt2", heads="3", kv_heads="3", head_dim="32",
                           intermediate="384", qkv_bias="true", tied_embeddings="true",
                           dtype="fp32", grad_clip="0.5"),
    # Llama GQA 6 q heads / 2 kv heads, qkv bias (Qwen2 style), untied, no clipping, linear
    # schedule with 2 warmup steps, decay on norms and biases too.
    "llama_gqa_bias_untied_fp32": dict(arch="llama", heads="6", kv_heads="2", head_dim="16",
                                       intermediate="256", qkv_bias="true",
                                       tied_embeddings="false", dtype="fp32", grad_clip="0",
                                       lr_schedule="linear", warmup_steps="2",
                                       decay_norms_and_biases="true", rope_theta="1000000.0"),
    # Llama MQA (1 kv head), no qkv bias, tied, constant lr, 3 layers, T 31, D 24.
    "llama_mqa_nobias_tied_fp32": dict(arch="llama", heads="4", kv_heads="1", head_dim="24",
                                       intermediate="200", qkv_bias="false",
                                       tied_embeddings="true", dtype="fp32",
                                       lr_schedule="constant", warmup_steps="0", layers="3",
                                       T="31", grad_accum="3", steps="3"),
    # bf16 GPT-2, untied, GQA 4/2 heads, no warmup.
    "gpt2_untied_gqa_bf16": dict(arch="gpt2", heads="4", kv_heads="2", head_dim="24",
                                 intermediate="384", qkv_bias="true", tied_embeddings="false",
                                 dtype="bf16", warmup_steps="0"),
    # Llama GQA with packed documents (data.pack_documents): ~1 token in 6 ends a document.
    "llama_gqa_packed_fp32": dict(arch="llama", heads="6", kv_heads="2", head_dim="16",
                                  intermediate="256", qkv_bias="true", tied_embeddings="false",
                                  dtype="fp32", doc_eod="7"),
    # GPT-2 with packed documents: learned positions restart per document.
    "gpt2_packed_fp32": dict(arch="gpt2", heads="3", kv_heads="3", head_dim="32",
                             intermediate="384", qkv_bias="true", tied_embeddings="true",
                             dtype="fp32", doc_eod="11"),
    # bf16 Llama GQA with bias, untied.
    "llama_gqa_bias_bf16": dict(arch="llama", heads="6", kv_heads="2", head_dim="16",
                                intermediate="256", qkv_bias="true", tied_embeddings="false",
                                dtype="bf16"),
    # The precision policy: bf16 parameters and moments (GPT-2, untied).
    "gpt2_param_optim_bf16": dict(arch="gpt2", heads="4", kv_heads="4", head_dim="24",
                                  intermediate="384", qkv_bias="true", tied_embeddings="false",
                                  dtype="bf16", param_dtype="bf16", optim_dtype="bf16"),
}


def make_inputs(meta, seed):
    spec = rm.Spec.from_metadata(meta)
    rng = np.random.default_rng(seed)
    params = {}
    for n, shp in rm.param_shapes(spec).items():
        if n.endswith("norm.weight"):
            a = 1.0 + 0.1 * rng.standard_normal(shp)
        elif n.endswith(".bias"):
            a = 0.02 * rng.standard_normal(shp)
        elif n == "pos_embed.weight":
            a = 0.01 * rng.standard_normal(shp)
        else:
            a = 0.05 * rng.standard_normal(shp)
        if n in ("embed.weight", "lm_head.weight"):
            a[spec.V:] = 0.0
        params[n] = a.astype(np.float32)
    shp = (spec.S, spec.A, spec.B, spec.T)
    tokens = rng.integers(0, spec.V, size=shp).astype(np.int32)
    tokens.flat[0] = spec.V - 1
    # targets: mostly the next token, some random, ~12% ignored, uneven per micro-batch
    targets = np.roll(tokens, -1, axis=-1).copy()
    rnd = rng.random(shp)
    targets[rnd < 0.3] = rng.integers(0, spec.V, size=int((rnd < 0.3).sum()))
    targets[rnd > 0.88] = rm.IGNORE_INDEX
    targets[:, 0, 0, :5] = rm.IGNORE_INDEX  # micro-batch 0 has fewer targets than the others
    if spec.doc_eod >= 0:  # packed: documents end at doc_eod, whose target is ignored
        tokens[tokens == spec.doc_eod] = 0
        tokens[rng.random(shp) < 1.0 / 6] = spec.doc_eod
        targets[tokens == spec.doc_eod] = rm.IGNORE_INDEX
    return spec, params, tokens, targets


def make_dump(meta, seed, variant=()):
    """(tensors, meta) in loom_refdump layout, produced by the reference."""
    spec, params, tokens, targets = make_inputs(meta, seed)
    if "no_policy" in variant:  # computed with fp32 storage, labelled with the policy
        spec.param_dtype = spec.optim_dtype = "fp32"
    if spec.param_dtype == "bf16":  # the initial parameters as loom stores them
        params = {n: rm.bf16_round(torch.tensor(a)).numpy() for n, a in params.items()}
    if spec.bf16:
        res = rm.run_all(spec, params, tokens, targets, torch.float64,
                         bf16="no_bf16" not in variant, variant=variant)
    else:
        res = rm.run_all(spec, params, tokens, targets, torch.float32, variant=variant)
    t = {}
    for n, a in params.items():
        t["param." + n] = a
    t["tokens"] = tokens
    t["targets"] = targets
    for n, a in res.items():
        if not n.startswith("cond."):
            t[n] = np.asarray(a, dtype=np.float32)
    return t, dict(meta)


def perturbations(spec, t):
    """(label, modified tensors) that the checker must reject. Sizes are 10x the tolerance of
    the quantity: 1e-3 relative for fp32 gradients, as asked; bf16 tolerances are wider."""
    tol = ck.TOL_BF16 if spec.bf16 else ck.TOL_FP32
    out = []

    def scaled(name, f, label=None):
        c = dict(t)
        c[name] = t[name] * np.float32(1 + f)
        out.append((label or "%s scaled by 1+%g" % (name, f), c))

    scaled("grad.layers.0.mlp.up.weight", 10 * tol["grad"])
    gname = "grad.final_norm.weight"
    c = dict(t)
    g = t[gname].copy()
    g[7] += np.float32(10 * tol["grad"] * np.linalg.norm(g))
    c[gname] = g
    out.append(("%s[7] += %g*||g||" % (gname, 10 * tol["grad"]), c))
    c = dict(t)
    l = t["losses"].copy()
    l[-1] *= np.float32(1 + 10 * tol["losses_later"])
    c["losses"] = l
    out.append(("losses[-1] scaled by 1+%g" % (10 * tol["losses_later"]), c))
    c = dict(t)
    l = t["loss0"].copy()
    l[0] *= np.float32(1 + 10 * tol["loss0"])
    c["loss0"] = l
    out.append(("loss0 scaled by 1+%g" % (10 * tol["loss0"]), c))
    scaled("final.layers.1.attn.v.weight", 10 * tol["final"])
    c = dict(t)
    lr = t["lrs"].copy()
    lr[1] *= np.float32(1 + 1e-6)
    c["lrs"] = lr
    out.append(("lrs[1] scaled by 1+1e-6", c))
    c = dict(t)
    lg = t["logits"].copy()
    lg[0, 3, 5] += np.float32(10 * tol["logits"] * np.linalg.norm(lg))
    c["logits"] = lg
    out.append(("logits[0,3,5] += %g*||logits||" % (10 * tol["logits"]), c))
    if spec.param_dtype == "bf16":  # one stored value off the bf16 grid: a missing rounding
        c = dict(t)
        f = t["final.layers.0.mlp.up.weight"].copy()
        f.view(np.uint32)[3] |= np.uint32(1)
        c["final.layers.0.mlp.up.weight"] = f
        out.append(("final.layers.0.mlp.up.weight[3] low bit set (not bf16)", c))
    if spec.optim_dtype == "bf16":
        c = dict(t)
        m = t["exp_avg_sq.layers.1.attn.q.weight"].copy()
        m.view(np.uint32)[0] |= np.uint32(1)
        c["exp_avg_sq.layers.1.attn.q.weight"] = m
        out.append(("exp_avg_sq.layers.1.attn.q.weight[0] low bit set", c))
    return out


def test_st_io(tmp):
    rng = np.random.default_rng(1)
    t = {"a": rng.standard_normal((3, 5)).astype(np.float32),
         "b": np.arange(7, dtype=np.int32), "c": rng.standard_normal(4),
         "d": np.zeros((0, 3), np.float32), "e": np.arange(3, dtype=np.int64)}
    bits = st_io.f32_to_bf16_bits(np.array([1.0, -2.5, 3.14159, 1e-3], np.float32))
    t["f"] = bits
    buf = st_io.dumps(t, {"k": "v"}, dtypes={"f": "BF16"})
    r, md = st_io.parse(buf)
    assert md == {"k": "v"}
    for n in "abcde":
        assert r[n].dtype == t[n].dtype and np.array_equal(r[n], t[n]), n
    want = torch.tensor([1.0, -2.5, 3.14159, 1e-3]).bfloat16().float().numpy()
    assert np.array_equal(r["f"], want), (r["f"], want)
    # corruptions
    (n,) = struct.unpack("<Q", buf[:8])
    head = buf[8:8 + n].decode()

    def with_header(h, data=None):
        hb = h.encode()
        return struct.pack("<Q", len(hb)) + hb + (buf[8 + n:] if data is None else data)

    bad = {
        "trailing byte": buf + b"\0",
        "short data": buf[:-1],
        "header past end": struct.pack("<Q", len(buf)) + buf[8:],
        "gap": with_header(head.replace('"data_offsets":[0,60]', '"data_offsets":[4,64]')),
        "duplicate key": with_header(head.replace('{"__metadata__"', '{"a":1,"__metadata__"')),
        "bad dtype": with_header(head.replace('"F32"', '"F33"', 1)),
        "shape mismatch": with_header(head.replace('"shape":[3,5]', '"shape":[5,5]')),
        "metadata not str": with_header(head.replace('"k":"v"', '"k":1')),
        "too short": b"\1\0\0",
    }
    assert '"data_offsets":[0,60]' in head, head
    for label, b in bad.items():
        try:
            st_io.parse(b)
        except st_io.SafetensorsError:
            continue
        raise AssertionError("st_io accepted a corrupt file: %s" % label)
    print("st_io: round trip and %d corruption cases ok" % len(bad))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="write the dumps into this directory and keep them")
    ap.add_argument("--verbose", action="store_true", help="print the full tables")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.time()
    tmp = args.keep or tempfile.mkdtemp(prefix="loom_torch_selftest_")
    os.makedirs(tmp, exist_ok=True)
    failures = []
    try:
        test_st_io(tmp)
        summary = []
        for ci, (name, over) in enumerate(CONFIGS.items()):
            meta = dict(BASE)
            meta.update(over)
            tens, md = make_dump(meta, seed=100 + ci)
            path = os.path.join(tmp, name + ".safetensors")
            st_io.write(path, tens, md)
            tensors, meta_r = st_io.read(path)
            dtypes = st_io.read_dtypes(path)
            spec = rm.Spec.from_metadata(meta_r)
            refs = ck.compute_refs(spec, tensors)
            buf = io.StringIO()
            code, rows = ck.check_tensors(tensors, meta_r, dtypes, refs=refs, out=buf)
            print("== %s: honest dump -> exit %d" % (name, code))
            if args.verbose or code != 0:
                print(buf.getvalue())
            if code != 0:
                failures.append("%s: honest dump rejected" % name)
            summary.append((name, rows))
            for label, bad in perturbations(spec, tensors):
                buf = io.StringIO()
                code, rows = ck.check_tensors(bad, meta_r, dtypes, refs=refs, quiet=True, out=buf)
                failed = [r.quantity for r in rows if not r.ok]
                print("   perturbed %-48s -> exit %d (failing: %s)" % (label, code, ", ".join(failed)))
                if code != 1:
                    failures.append("%s: perturbation %s not detected" % (name, label))
        # semantic mutations
        muts = [("gpt2_tied_fp32", ("gelu_erf",)), ("llama_gqa_bias_untied_fp32", ("rope_interleaved",)),
                ("llama_mqa_nobias_tied_fp32", ("micro_mean",)),
                ("gpt2_packed_fp32", ("pack_positions_not_reset",)),
                ("llama_gqa_packed_fp32", ("pack_no_mask",)),
                ("llama_gqa_bias_bf16", ("rope_interleaved",)), ("gpt2_untied_gqa_bf16", ("no_bf16",)),
                ("gpt2_param_optim_bf16", ("truncate",)), ("gpt2_param_optim_bf16", ("no_policy",))]
        for name, var in muts:
            meta = dict(BASE)
            meta.update(CONFIGS[name])
            tens, md = make_dump(meta, seed=100 + list(CONFIGS).index(name), variant=var)
            buf = io.StringIO()
            code, rows = ck.check_tensors(tens, md, None, quiet=True, out=buf, with_info=False)
            failed = [r.quantity for r in rows if not r.ok]
            print("== %s made with variant %s -> exit %d (%d failing rows, e.g. %s)"
                  % (name, var[0], code, len(failed), ", ".join(failed[:4])))
            if code != 1:
                failures.append("%s: variant %s not detected" % (name, var))
        # command line: good, perturbed, malformed
        good = os.path.join(tmp, "gpt2_tied_fp32.safetensors")
        trunc = os.path.join(tmp, "truncated.safetensors")
        with open(good, "rb") as f:
            data = f.read()
        with open(trunc, "wb") as f:
            f.write(data[:-4])
        script = os.path.join(HERE, "check_refdump.py")
        for p, want in ((good, 0), (trunc, 2)):
            r = subprocess.run([sys.executable, script, p, "--quiet", "--threads", str(args.threads)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, universal_newlines=True)
            print("== cli %s -> exit %d (want %d)" % (os.path.basename(p), r.returncode, want))
            if r.returncode != want:
                print(r.stdout)
                failures.append("cli on %s exited %d, want %d" % (p, r.returncode, want))

        print("\nmeasured errors of the honest dumps (rel_err / tol, worst row per kind):")
        for name, rows in summary:
            kinds = {}
            for r in rows:
                if r.tol is None or r.tol == 0:
                    continue
                k = r.quantity.split(".")[0].split("[")[0]
                k = k + " vs " + r.vs.split(" ")[0]
                if k not in kinds or r.rel_err / r.tol > kinds[k][0] / kinds[k][1]:
                    kinds[k] = (r.rel_err, r.tol, r.quantity)
            print("  %s" % name)
            for k, (e, tl, q) in kinds.items():
                print("    %-32s %.2e (tol %.0e, %s)" % (k, e, tl, q))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    dt = time.time() - t0
    print("\nselftest took %.1f s" % dt)
    if failures:
        print("SELFTEST FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("SELFTEST PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
