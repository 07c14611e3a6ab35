#!/usr/bin/python3
"""Check loom's MoE layer (or Qwen3 attention) against the independent PyTorch reference
ref_moe.py, in float64, from a dump of loom_moe_block_dump.

usage: check_moe_block.py DUMP.safetensors

MoE dumps: two layers, L = sum_l <R_l, y_l> + aux_coef * load_balancing_loss(both layers'
probabilities and selections) + sum_l z_coef * z_loss(layer l's logits). Checked:
  - the routing, exactly: the experts chosen (idx), which pairs the capacity drops and how
    many (loom's inputs keep the k-th and (k+1)-th scores, and the weights at a capacity cut,
    at least 1e-4 apart — the dump asserts it — while fp32 moves probabilities by ~1e-7);
  - y, 1e-5 relative norm (fp32: sums of <= 30 products and softmaxes of <= 8 terms, ~1e-7
    measured; the whole-model checks use the same), bf16 1e-3 (below);
  - aux and z, 1e-5 relative (computed in double from fp32 probabilities and log-sum-exps);
  - dL/dx and the gradient of every weight, 1e-4 relative norm (fp32: the whole-model checks'
    tolerance for gradients; measured ~1e-7), bf16 1e-3: loom rounds every product's operands
    and output gradient to bf16 exactly as ref_moe.linear(bf16=True) does, so the two differ
    only where fp32 noise flips a rounding (measured <= 1e-5); the dense checks' 1e-2 would
    let a missing rounding through: an emulation that does not round the output gradients is
    1.4e-3..2.6e-3 away and fails here.
Without sel_bias the reference's load-balancing loss is also compared with HF's
load_balancing_loss_func as written (it chooses again by topk).
The checker shows it can fail: a gradient moved by 10x its tolerance must be rejected, and in
bf16 loom's output must be farther from the plain fp32 reference than from the emulation.
Attention dumps: y 1e-5, every gradient 1e-4 (same reasons).
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_moe  # noqa: E402
import st_io  # noqa: E402

torch.set_num_threads(1)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


class Report:
    def __init__(self):
        self.fails = []

    def check(self, what, err, tol):
        ok = err <= tol
        print("%-48s rel %.3e (tol %.0e)%s" % (what, err, tol, "" if ok else " FAIL"))
        if not ok:
            self.fails.append(what)

    def exact(self, what, ok, detail=""):
        print("%-48s %s%s" % (what, "equal" if ok else "DIFFERENT", detail))
        if not ok:
            self.fails.append(what)


def t64(a, grad=False):
    return torch.tensor(np.asarray(a, np.float64), dtype=torch.float64, requires_grad=grad)


# loom's dump names -> ref_moe's parameter names
NAMES = {"router": "router", "sel_bias": "sel_bias", "experts.gate": "experts_gate",
         "experts.up": "experts_up", "experts.down": "experts_down",
         "shared.gate": "shared_gate_proj", "shared.up": "shared_up",
         "shared.down": "shared_down", "shared_gate": "shared_expert_gate"}


def run_moe(T, meta, bf16):
    """The reference's losses and gradients on the dump's weights and inputs."""
    L = int(meta["layers"])
    cfg = dict(E=int(meta["E"]), k=int(meta["k"]), norm_topk=meta["norm_topk"] == "1",
               capacity_factor=float(meta["capacity_factor"]),
               drop_by_position=meta["drop_by_position"] == "1", shared=int(meta["Is"]) > 0)
    layers = []
    for l in range(L):
        pre = "layers.%d." % l
        P = {}
        for n, r in NAMES.items():
            if pre + "param." + n in T:
                P[r] = t64(T[pre + "param." + n], grad=(n != "sel_bias"))
        x = t64(T[pre + "x"], grad=True)
        y, info = ref_moe.moe_block(x, P, cfg, bf16=bf16)
        layers.append(dict(P=P, x=x, y=y, info=info, R=t64(T[pre + "R"])))
    aux = ref_moe.load_balancing_loss([d["info"]["probs"] for d in layers],
                                      [d["info"]["idx"] for d in layers], cfg["E"])
    z = sum(ref_moe.z_loss(d["info"]["logits"], 1.0) for d in layers)
    total = sum((d["y"] * d["R"]).sum() for d in layers)
    total = total + float(meta["aux_coef"]) * aux + float(meta["z_coef"]) * z
    total.backward()
    return layers, cfg, float(meta["aux_coef"]) * aux.item(), float(meta["z_coef"]) * z.item(), aux


def check_moe(T, meta, rep):
    bf16 = meta["bf16"] == "1"
    layers, cfg, aux, z, aux_raw = run_moe(T, meta, bf16)
    tol_y, tol_g = (1e-3, 1e-3) if bf16 else (1e-5, 1e-4)
    print("case %s: E=%s k=%s Ie=%s Is=%s norm_topk=%s capacity_factor=%s by_position=%s "
          "sel_bias=%s bf16=%s (margin at switches %s)" % (
              meta["case"], meta["E"], meta["k"], meta["Ie"], meta["Is"], meta["norm_topk"],
              meta["capacity_factor"], meta["drop_by_position"], meta["sel_bias"], meta["bf16"],
              meta["margin"]))
    worst = 0.0
    for l, d in enumerate(layers):
        pre = "layers.%d." % l
        info = d["info"]
        rep.exact("layer %d: chosen experts" % l,
                  np.array_equal(np.asarray(T[pre + "idx"]), info["idx"].numpy()))
        kept = np.asarray(T[pre + "pair_row"]) >= 0
        rep.exact("layer %d: pairs kept under capacity %d" % (l, info["capacity"]),
                  np.array_equal(kept, info["keep"].numpy()),
                  " (%d dropped)" % info["dropped"])
        rep.exact("layer %d: dropped count" % l, int(T[pre + "dropped"]) == info["dropped"]
                  and int(T[pre + "capacity"]) == info["capacity"])
        rep.check("layer %d: probs" % l, rel(T[pre + "probs"], info["probs"].detach().numpy()),
                  tol_y)
        rep.check("layer %d: y" % l, rel(T[pre + "y"], d["y"].detach().numpy()), tol_y)
        rep.check("layer %d: dx" % l, rel(T[pre + "dx"], d["x"].grad.numpy()), tol_g)
        for n, r in NAMES.items():
            if n == "sel_bias" or r not in d["P"]:
                continue
            e = rel(T[pre + "grad." + n], d["P"][r].grad.numpy())
            worst = max(worst, e)
            rep.check("layer %d: grad %s" % (l, n), e, tol_g)
    rep.check("aux (load balancing) loss", abs(float(T["aux"]) - aux) / abs(aux), 1e-5)
    rep.check("z loss", abs(float(T["z"]) - z) / abs(z), 1e-5)
    if meta["sel_bias"] == "0":
        hf = ref_moe.hf_load_balancing_loss_func(tuple(d["info"]["logits"] for d in layers),
                                                 cfg["E"], cfg["k"])
        rep.check("reference aux vs HF load_balancing_loss_func",
                  abs(hf.item() - aux_raw.item()) / abs(aux_raw.item()), 1e-12)
    # the checker can fail: a gradient 10 tolerances off is rejected
    n0 = "layers.0.grad.experts.down"
    g = np.asarray(T[n0], np.float64)
    bad = g * (1 + 10 * tol_g)
    ok = rel(bad, layers[0]["P"]["experts_down"].grad.numpy()) > tol_g
    rep.exact("checker rejects a gradient 10 tolerances off", ok)
    if bf16:  # the rounding is really applied: loom sits on the emulation, not on plain fp32
        plain, _, _, _, _ = run_moe(T, meta, False)
        e_plain = rel(T["layers.0.y"], plain[0]["y"].detach().numpy())
        e_emul = rel(T["layers.0.y"], layers[0]["y"].detach().numpy())
        print("bf16: loom's y vs emulation %.3e, vs plain fp32 %.3e" % (e_emul, e_plain))
        rep.exact("bf16 rounding applied (y nearer the emulation)", e_emul < e_plain / 4)
    print("gradients: worst rel %.3e (tol %.0e)" % (worst, tol_g))


def check_attention(T, meta, rep):
    cfg = dict(heads=int(meta["heads"]), kv_heads=int(meta["kv_heads"]),
               head_dim=int(meta["head_dim"]), rope_theta=float(meta["rope_theta"]),
               eps=float(meta["eps"]))
    print("Qwen3 attention: hidden %s, heads %s, kv_heads %s, head_dim %s" % (
        meta["hidden"], meta["heads"], meta["kv_heads"], meta["head_dim"]))
    P = {n[len("param."):]: t64(a, grad=True) for n, a in T.items() if n.startswith("param.")}
    x = t64(T["x"], grad=True)
    y = ref_moe.qwen3_attention(x, P, cfg)
    (y * t64(T["R"])).sum().backward()
    rep.check("y", rel(T["y"], y.detach().numpy()), 1e-5)
    rep.check("dx", rel(T["dx"], x.grad.numpy()), 1e-4)
    for n, p in P.items():
        rep.check("grad " + n, rel(T["grad." + n], p.grad.numpy()), 1e-4)


def main():
    T, meta = st_io.read(sys.argv[1])
    rep = Report()
    if meta["kind"] == "attention":
        check_attention(T, meta, rep)
    else:
        check_moe(T, meta, rep)
    if rep.fails:
        print("FAILED: " + ", ".join(rep.fails))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
