#!/usr/bin/python3
"""Check a loom_refdump safetensors file against an independent PyTorch reference.

usage: /usr/bin/python3 tests/torch/check_refdump.py DUMP.safetensors [--quiet] [--threads N]
(--threads: torch CPU threads, default 1: at test sizes the matrices are tiny and OpenMP threads
spinning against a loaded machine made runs 10-100x slower with 2 threads than with 1.)

The dump holds loom's initial parameters, data, and loom's results (logits, loss0, grads of
step 0 micro-batch 0, per-step losses / lrs / grad_norms, final parameters). This script recomputes
all of them with ref_model.py from the same initial parameters and data, and prints a table:
  quantity | vs (which reference) | max abs err | rel err | tol | ok | torch (info)
rel err is ||loom - ref|| / ||ref|| for tensors and max_i |loom_i - ref_i| / |ref_i| for
per-step vectors and scalars. The "torch" column is informational: the same metric for a second
torch computation (fp32 dumps: torch float32 vs torch float64, i.e. the rounding floor an honest
fp32 implementation reaches; bf16 dumps: plain-fp32 torch vs emulated-bf16 torch, i.e. the size
of the bf16 effect the check has to resolve).

fp32 dumps are compared against torch float64 (params upcast from the dump's f32 values).
bf16 dumps are compared against the emulated-bf16 model run in float32 (BF16Linear), and their
losses additionally against the plain float32 model with a loose tolerance.

Exit status: 0 all checks pass, 1 some check fails (listed at the end), 2 malformed dump.
"""
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402
import ref_model as rm  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Tolerances, with the reason for each. "measured" = the selftest sweep: 12 random seeds of each
# selftest config (3 fp32, 2 bf16 configs), dumps made by torch float32 (fp32) or by the bf16
# emulation in float64 (bf16), checked here.
#
# fp32 dumps, against torch float64:
TOL_FP32 = {
    # One forward pass in fp32: every op is a dot product / reduction of length <= max(C, I, T)
    # with relative rounding ~1e-7 * sqrt(len); through L layers and the residual stream the
    # logits stay ~1e-6 relative. 1e-5 leaves 10x headroom and still catches any real
    # semantic difference (GELU erf vs tanh, wrong eps, RoPE convention: >= 1e-4).
    # measured: 4e-7..6e-7.
    "logits": 1e-5,
    # Mean of log-softmax values computed from those logits; same argument as logits.
    # measured: <= 9e-8.
    "loss0": 1e-5,
    # Backward sums over B*T rows (weight grads) and chains through L layers; fp32 rounding of
    # a full backward is ~1e-6..1e-5 relative in norm. 1e-4 per tensor is what a correct fp32
    # implementation meets with margin, while a 1e-3 relative error in any tensor fails.
    # measured: 8e-7..1.5e-6 (worst tensor of a dump).
    "grad": 1e-4,
    # Global L2 norm of the grads: a reduction of quantities checked at 1e-4; later steps
    # also carry the parameter differences below. measured: <= 6.3e-6.
    "grad_norms": 1e-4,
    # Step 0 loss: initial parameters, forward only (like loss0, over A micro-batches).
    "losses_first": 1e-5,
    # Later steps run on parameters that went through fp32 AdamW updates: Adam normalises each
    # gradient element (m_hat / sqrt(v_hat) ~ sign(g) on early steps), so fp32 gradient rounding
    # turns into update differences, and those compound step after step. Hence 10x looser.
    # measured (all steps): <= 6.8e-7.
    "losses_later": 1e-4,
    # Final parameters = initial + S Adam updates; update differences as above, measured in
    # norm relative to the parameter norm, over the elements that are not noise-driven
    # (COND_TAU below). measured: 8e-7..2.5e-5 (worst tensor of a dump).
    "final": 1e-4,
    # The schedule is closed-form; a correctly rounded float32 value is within half an ulp,
    # <= 2^-24 = 5.96e-8 relative, of the double value.
    "lrs": 1e-7,
}
# bf16 dumps, against the emulated-bf16 torch model in float32:
TOL_BF16 = {
    # Both sides round the same kind of fp32 values to bf16, but those values differ by fp32
    # summation-order noise (~1e-7), and near a bf16 rounding boundary that flips the rounded
    # value by one bf16 ulp (2^-8 relative). A flip perturbs everything downstream by ~1e-5,
    # which makes more flips in the next linear layer: the difference between two faithful
    # bf16 implementations grows ~10x per linear layer (measured in the selftest, 2 layers:
    # logits 1e-3..3e-3 between the float64 and float32 emulations). Hence 1e-2 on logits.
    # The token-mean loss averages that noise away (measured <= 1.1e-4): 1e-3.
    "logits": 1e-2,
    "loss0": 1e-3,
    # Gradients also go through round(dy) in every linear backward: measured 1.9e-3..6e-3
    # (worst tensor of a dump; the margin is only 1.7x: a deeper model has more chaos).
    "grad": 1e-2,
    # measured <= 2.6e-3.
    "grad_norms": 1e-2,
    # measured (all steps) <= 1.8e-4.
    "losses_first": 1e-3,
    "losses_later": 1e-3,
    # Final parameters: the gradient noise above, normalised element-wise by AdamW; measured
    # 1.8e-3..8.8e-3 relative norm per tensor after excluding noise-driven elements (COND_TAU).
    "final": 2e-2,
    "lrs": 1e-7,
}
# bf16 dumps, against the plain fp32 torch model: bf16 input rounding (8-bit mantissa, relative
# 2^-9) perturbs logits by ~5e-3 relative at these sizes; the token-mean loss (~ln V) moves by
# much less (measured <= 2.7e-4). 2e-2 only catches gross errors (e.g. rounding to the wrong
# format, or rounding the master weights themselves).
TOL_BF16_VS_FP32 = {"loss0": 2e-2, "losses": 2e-2}
# bf16 dumps: ||logits_emu - logits_plain|| / ||logits_loom - logits_plain|| must stay below
# this. measured: honest dumps 0.99..1.00 (the bf16-vs-bf16 noise is small next to the bf16
# effect); a "bf16" dump computed without any rounding: 1.1e4..1.3e4.
TOL_BF16_APPLIED = 5.0
# Precision policy (training.param_dtype / optim_dtype = bf16), against the same emulated-bf16
# model with the policy applied (ref_model.train). Parameters, the step's gradient and the
# moments are stored in bf16, so where the two sides' fp32 values differ by fp32 noise a
# stored value can round one bf16 ulp apart (2^-8 relative); a flipped parameter element feeds
# that ulp into every later step. Flips hit a small fraction of the elements: measured final
# parameters 2e-4..1.1e-3 relative norm for loom (worst tensor; gpt2 and llama, optim fp32 and
# bf16), 3.4e-3 for the selftest's float64 emulation (its larger lr, 3e-3, moves more values
# across rounding boundaries). The final tolerance is 1e-2 (3x over the worst measured):
# a reference whose stores truncate instead of rounding to nearest even is 4.4e-2 away
# (ref_model variant "truncate"), and a missing rounding (fp32 storage) is caught exactly by
# the "bf16 values" rows (the reference without the policy is only 5.6e-3 away).
TOL_POLICY_FINAL = 1e-2
# AdamW moments after S steps, every dump (all tensors together): exp_avg is a decayed sum of
# gradients, exp_avg_sq one of their squares; both follow the gradient differences (grad
# tolerance 1e-2 per tensor) along trajectories that drift apart step by step. Measured: loom
# <= 4.7e-3, the selftest's float64 emulations <= 1.1e-2; 3e-2 leaves 2.7x.
TOL_MOMENTS = {"exp_avg": 3e-2, "exp_avg_sq": 3e-2}


# Mixture-of-Experts routing in bf16 dumps: the router's input and weights are rounded to bf16 on
# both sides, but an fp32-level difference (summation order) can flip a rounding and move a
# router logit by ~2^-8 of one term, enough to swap the k-th and (k+1)-th expert of a token
# whose two scores are within ~1e-4 (the closest pairs of a run sit at ~1e-5). Such swaps are
# rare: measured 2 of 2520 selections (0.08%); the tolerance, 1%, still fails a router that
# chooses by anything else (a wrong bias or top-k order changes most selections). fp32 dumps
# must match exactly (gaps >= 1e-5 against fp32 rounding of ~1e-7).
TOL_BF16_ROUTED = 1e-2


def not_bf16_count(a):
    """Elements of a (float array) that are not exactly a bf16 value."""
    a = np.asarray(a, dtype=np.float32)
    u = a.view(np.uint32)
    return int(np.count_nonzero(u & 0xFFFF))


# Final-parameter elements whose gradient falls below COND_TAU * rms(tensor gradient) at some
# step are noise-driven under AdamW (see compare()). fp32: gradient noise is ~1e-7..1e-6 of the
# tensor rms, so above 1e-3 * rms an element's gradient (hence its update) is known to ~1e-3
# relative or better; ~0.7% of the elements fall below (measured), the rest meets 1e-4 with a
# 5x margin (at 1e-4 * rms a RoPE model's k.bias already fails). bf16: the gradient noise is
# ~1e-3 of the rms (rounding flips), so 1e-2 (~5% of the elements).
COND_TAU = {"fp32": 1e-3, "bf16": 1e-2}


def rel_norm(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    d = np.linalg.norm((a - b).ravel())
    nb = np.linalg.norm(b.ravel())
    if nb == 0:
        return 0.0 if d == 0 else math.inf
    return float(d / nb)


def max_rel(a, b):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.size == 0:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.abs(a - b) / np.abs(b)
    r[(a == b)] = 0.0
    return float(np.max(r))


def max_abs(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def zero_grad_by_symmetry(spec, name):
    """gpt2's attn.k.bias has an exactly zero gradient: adding b to every key adds q_i.b/sqrt(D)
    to every score of query row i, and softmax is invariant to a per-row shift. (Not so for
    llama: RoPE rotates the bias differently at each position.) Its computed gradient is pure
    rounding noise, so a relative error is meaningless."""
    return spec.arch == "gpt2" and name.endswith(".attn.k.bias")


# ---------------------------------------------------------------------------------------------


def validate(spec, tensors, dtypes=None):
    """Structural checks. Returns a list of error strings (empty when fine)."""
    errs = []
    s = spec
    shapes = rm.param_shapes(spec)
    expect = {}
    for n, shp in shapes.items():
        for pre in ("param.", "grad.", "final."):
            expect[pre + n] = tuple(shp)
    expect["tokens"] = (s.S, s.A, s.B, s.T)
    expect["targets"] = (s.S, s.A, s.B, s.T)
    expect["logits"] = (s.B, s.T, s.Vp)
    expect["loss0"] = (1,)
    for n in ("losses", "lrs", "grad_norms"):
        expect[n] = (s.S,)
    for n, shp in expect.items():
        if n not in tensors:
            errs.append("missing tensor %s %s" % (n, shp))
        elif tuple(tensors[n].shape) != shp:
            errs.append("%s has shape %s, expected %s" % (n, tuple(tensors[n].shape), shp))
    for n in tensors:
        if n.split(".", 1)[0] in ("param", "grad", "final") and n not in expect:
            errs.append("unexpected tensor %s (not a parameter of this spec)" % n)
    if dtypes:
        for n, dt in dtypes.items():
            if n not in expect:
                continue
            if n in ("tokens", "targets"):
                if dt != "I32":
                    errs.append("%s is %s, expected I32" % (n, dt))
            elif dt not in ("F32", "F64"):
                errs.append("%s is %s, expected F32" % (n, dt))
    if errs:
        return errs
    tok, tgt = tensors["tokens"], tensors["targets"]
    if tok.min() < 0 or tok.max() >= s.V:
        errs.append("tokens outside [0, V=%d): min %d max %d" % (s.V, tok.min(), tok.max()))
    bad = (tgt != rm.IGNORE_INDEX) & ((tgt < 0) | (tgt >= s.V))
    if bad.any():
        errs.append("%d targets outside [0, V) and not -100" % int(bad.sum()))
    if not (tgt[0, 0] != rm.IGNORE_INDEX).any():
        errs.append("step 0 micro-batch 0 has no target (loss0 undefined)")
    for st in range(s.S):
        if not (tgt[st] != rm.IGNORE_INDEX).any():
            errs.append("step %d has no target (loss undefined)" % st)
    for n, v in tensors.items():
        if v.dtype.kind == "f" and not np.all(np.isfinite(v)):
            errs.append("%s has %d non-finite values" % (n, int((~np.isfinite(v)).sum())))
    return errs


def compute_refs(spec, tensors, with_info=True):
    """Reference results. "main" is what the checks compare against; "info" a second torch
    computation (always run for bf16 dumps: it is the plain-fp32 model the losses are also
    checked against; optional for fp32 dumps, where it only fills the info column)."""
    params = {n[len("param."):]: tensors[n].astype(np.float32)
              for n in tensors if n.startswith("param.")}
    tok, tgt = tensors["tokens"], tensors["targets"]
    import torch
    if spec.bf16:
        return {"main": ("torch-bf16emu-f32",
                         rm.run_all(spec, params, tok, tgt, torch.float32, bf16=True)),
                "info": ("torch-f32", rm.run_all(spec, params, tok, tgt, torch.float32))}
    refs = {"main": ("torch-f64", rm.run_all(spec, params, tok, tgt, torch.float64))}
    if with_info:
        refs["info"] = ("torch-f32", rm.run_all(spec, params, tok, tgt, torch.float32))
    return refs


class Row:
    def __init__(self, quantity, vs, abs_err, rel_err, tol, info=None, note="", extra_ok=True):
        self.quantity, self.vs, self.abs_err, self.rel_err = quantity, vs, abs_err, rel_err
        self.tol, self.info, self.note = tol, info, note
        self.ok = tol is None or (rel_err <= tol and extra_ok)


def compare(spec, tensors, refs):
    s = spec
    bf16 = s.bf16
    tol = TOL_BF16 if bf16 else TOL_FP32
    if s.param_dtype == "bf16":
        tol = dict(tol, final=TOL_POLICY_FINAL)
    vs, R = refs["main"]
    I = refs["info"][1] if "info" in refs else None

    def im(metric, q, b, sel=slice(None)):  # info metric, None without an info run
        return None if I is None else metric(I[q][sel], b)
    rows = []

    def rown(q, metric, tolv, note="", info_metric=None):
        a = tensors[q]
        b = R[q]
        rows.append(Row(q, vs, max_abs(a, b), metric(a, b), tolv,
                        im(info_metric or metric, q, b), note))

    rown("logits", rel_norm, tol["logits"])
    rown("loss0", max_rel, tol["loss0"])

    shapes = rm.param_shapes(s)
    for n in shapes:
        q = "grad." + n
        if zero_grad_by_symmetry(s, n):
            # loom's gradient must be noise-sized next to its structural twin's (q.bias: dq and
            # dk are the same kind of sum, dS @ k vs dS^T @ q).
            scale = np.linalg.norm(R[q.replace(".attn.k.", ".attn.q.")].ravel())
            a = tensors[q]
            if s.bf16:
                # bf16 attention rounds dS before dK = dS^T q: the rows of dS no longer sum to
                # exactly zero, so the gradient is that rounding residue, the same in the
                # emulation (BF16Attention rounds the same operands); compared with it, scaled
                # like the symmetry check (rounding flips move it by ~2^-8 of single terms)
                b = R[q]
                rows.append(Row(q, vs + " (/ q.bias)", max_abs(a, b),
                                float(np.linalg.norm((a - b).ravel()) / scale), tol["grad"],
                                None, "||g - emu|| / ||grad attn.q.bias||: bf16 dS residue"))
                continue
            rows.append(Row(q, "0 (symmetry)", float(np.max(np.abs(a))),
                            float(np.linalg.norm(a.ravel()) / scale), tol["grad"],
                            None if I is None else float(np.linalg.norm(I[q].ravel()) / scale),
                            "||g|| / ||grad attn.q.bias||: exact gradient is 0"))
        else:
            rown(q, rel_norm, tol["grad"])

    rown("grad_norms", max_rel, tol["grad_norms"])
    a, b = tensors["losses"], R["losses"]
    rows.append(Row("losses[0]", vs, max_abs(a[:1], b[:1]), max_rel(a[:1], b[:1]),
                    tol["losses_first"], im(max_rel, "losses", b[:1], slice(0, 1))))
    if s.S > 1:
        rows.append(Row("losses[1:]", vs, max_abs(a[1:], b[1:]), max_rel(a[1:], b[1:]),
                        tol["losses_later"], im(max_rel, "losses", b[1:], slice(1, None))))
    if s.E:
        rows.extend(router_rows(s, tensors, R, vs, tol))
    # lrs against the closed form in double (both torch runs use exactly these)
    lr_exact = np.array([rm.lr_at(s, st) for st in range(s.S)])
    rows.append(Row("lrs", "closed form", max_abs(tensors["lrs"], lr_exact),
                    max_rel(tensors["lrs"], lr_exact), tol["lrs"],
                    max_rel(lr_exact.astype(np.float32), lr_exact)))

    # Final parameters. AdamW normalises every element by its own gradient history, so an
    # element whose gradient is tiny next to the rest of its tensor gets an update whose size
    # and sign are set by rounding noise (at step 1 the update is lr * g/(|g|+eps) ~ lr*sign(g)
    # whatever |g| is). Such elements exist by construction, e.g. the k.bias components of the
    # lowest RoPE frequencies (gradient ~ rotation angle over T: 1e-5 of the others with
    # theta 1e6), or any element whose gradient crosses zero at some step. Elements with
    # min_s |g_s,i| < COND_TAU * rms(g_s) in the reference run are therefore checked only against
    # the largest drift AdamW allows (both runs move at most sum_s lr_s * adam_bound_s); the rest
    # of the tensor gets the relative-norm tolerance.
    drift = sum(rm.lr_at(s, st) * rm.adam_max_step_factor(s.beta1, s.beta2, st + 1)
                for st in range(s.S))
    bound = 2 * drift
    tau = COND_TAU[s.dtype]
    for n in shapes:
        q = "final." + n
        a, b = tensors[q], R[q]
        if zero_grad_by_symmetry(s, n):
            rows.append(Row(q, vs + " (bound)", max_abs(a, b), max_abs(a, b) / bound, 1.0,
                            None if I is None else max_abs(I[q], b) / bound,
                            "max|diff| / (2 sum_s lr_s*adam_bound_s = %.3g): gradient is noise"
                            % bound))
            continue
        noisy = R["cond." + n] < tau
        k = int(noisy.sum())
        if k == 0:
            rown(q, rel_norm, tol["final"])
            continue
        well = ~noisy
        nd = max_abs(a[noisy], b[noisy])
        rows.append(Row(q, vs, max_abs(a, b), rel_norm(a[well], b[well]), tol["final"],
                        im(rel_norm, q, b[well], well),
                        "%d of %d elements with |g| < %g*rms: max|diff| %.2e <= %.2e"
                        % (k, a.size, tau, nd, bound), extra_ok=nd <= bound))

    # vocabulary padding: with zero initial padding rows, loom's padding logits, padding-row
    # gradients and final padding rows are exact zeros (x @ 0 rows; excluded from softmax).
    if s.Vp > s.V:
        heads = ["embed.weight"] + ([] if s.tied_embeddings else ["lm_head.weight"])
        if all(not tensors["param." + h][s.V:].any() for h in heads):
            vals = [np.abs(tensors["logits"][..., s.V:]).max()]
            for h in heads:
                vals.append(np.abs(tensors["grad." + h][s.V:]).max())
                vals.append(np.abs(tensors["final." + h][s.V:]).max())
            m = float(max(vals))
            rows.append(Row("padding (logits cols, grad/final rows)", "exact 0", m, m, 0.0,
                            None, "initial padding rows are zero"))

    # precision policy: what is stored in bf16 must hold bf16 values only, bit for bit (a
    # missing rounding leaves low mantissa bits set); the moments against the reference
    for pre, on in (("final.", s.param_dtype == "bf16"), ("last_grad.", s.param_dtype == "bf16"),
                    ("exp_avg.", s.optim_dtype == "bf16"), ("exp_avg_sq.", s.optim_dtype == "bf16")):
        names = [pre + n for n in shapes if pre + n in tensors]
        if not on or not names:
            continue
        bad = sum(not_bf16_count(tensors[q]) for q in names)
        total = sum(tensors[q].size for q in names)
        rows.append(Row(pre + "* bf16 values", "exact", float(bad), float(bad), 0.0, None,
                        "elements not representable in bf16, of %d" % total))
    for k in ("exp_avg", "exp_avg_sq"):
        # (gpt2's k.bias moments are moments of rounding noise: left out)
        names = [k + "." + n for n in shapes
                 if k + "." + n in tensors and k + "." + n in R and not zero_grad_by_symmetry(s, n)]
        if names:
            a = np.concatenate([tensors[q].ravel() for q in names])
            b = np.concatenate([R[q].ravel() for q in names])
            rows.append(Row(k + ".* (all tensors)", vs, max_abs(a, b), rel_norm(a, b),
                            TOL_MOMENTS[k], None, "AdamW moments after S steps"))

    if bf16:
        # against the plain fp32 model: the bf16 effect must stay small
        P32 = I
        for q, metric, t in (("loss0", max_rel, TOL_BF16_VS_FP32["loss0"]),
                             ("losses", max_rel, TOL_BF16_VS_FP32["losses"])):
            a, b = tensors[q], P32[q]
            rows.append(Row(q, "torch-f32 (plain)", max_abs(a, b), metric(a, b), t,
                            metric(R[q], b), "info: torch-bf16emu vs plain"))
        for q in ("logits", "grad_norms"):
            a, b = tensors[q], P32[q]
            m = rel_norm if q == "logits" else max_rel
            rows.append(Row(q, "torch-f32 (plain)", max_abs(a, b), m(a, b), None,
                            m(R[q], b), "measured only"))
        # Was bf16 applied at all? The checks above cannot tell: at small sizes the bf16 effect
        # on logits (plain vs emulated, ~5e-3) is within the bf16-vs-bf16 tolerance. But a
        # faithful bf16 loom is about as far from plain fp32 as the emulation is (ratio ~1),
        # while an fp32-only loom would be ~1e-6 away (ratio ~1e3 and more).
        d_emu = np.linalg.norm((R["logits"] - P32["logits"]).ravel())
        d_loom = np.linalg.norm((tensors["logits"] - P32["logits"]).ravel())
        ratio = float(d_emu / d_loom) if d_loom > 0 else math.inf
        rows.append(Row("logits: bf16 applied", "torch-f32 (plain)", float(d_loom), ratio,
                        TOL_BF16_APPLIED, None,
                        "||emu-plain|| / ||loom-plain||: ~1 if loom rounds to bf16"))
    return rows


def router_rows(s, tensors, R, vs, tol):
    """Mixture-of-Experts models: the routing exactly (every step's selections per MoE layer and
    expert, and the balancing bias they move), the router's aux and z losses like the losses.
    Top-k is discontinuous: a selection flips when fp32 rounding moves the k-th and (k+1)-th
    scores past each other, so the smallest gap between them over the run is shown (the
    reference's, float64): rounding differences are ~1e-7, gaps here >= 1e-5."""
    rows = []
    a, b = tensors["loads"], R["loads"]
    diff = int(np.abs(a.astype(np.int64) - b).sum()) // 2  # a changed selection counts twice
    if s.bf16:  # the fraction of selections a bf16 rounding flip changed (see TOL_BF16_ROUTED)
        total = int(b.sum())
        rows.append(Row("loads (selections per step, layer, expert)", vs, float(diff),
                        diff / max(total, 1), TOL_BF16_ROUTED, None,
                        "%d of %d selections differ; min top-k score gap %.2e"
                        % (diff, total, R["topk_gap"])))
    else:
        rows.append(Row("loads (selections per step, layer, expert)", vs + " (exact)",
                        float(diff), float(diff), 0.0, None,
                        "min top-k score gap %.2e over the run" % R["topk_gap"]))
    if s.capacity_factor > 0:  # which pairs the capacity drops follows the routing weights
        a, b = tensors["dropped"], R["dropped"]
        diff = int(np.abs(a.astype(np.int64) - b).sum())
        rows.append(Row("dropped pairs (per step and layer)", vs + (" (info)" if s.bf16 else
                        " (exact)"), float(diff), float(diff), None if s.bf16 else 0.0, None,
                        "%d dropped in all, capacity factor %g" % (int(b.sum()),
                                                                   s.capacity_factor)))
    for q in ("aux_losses", "z_losses"):
        a, b = tensors[q], R[q]
        rows.append(Row(q + "[0]", vs, max_abs(a[:1], b[:1]), max_rel(a[:1], b[:1]),
                        tol["losses_first"], None, "before its coefficient"))
        if s.S > 1:
            rows.append(Row(q + "[1:]", vs, max_abs(a[1:], b[1:]), max_rel(a[1:], b[1:]),
                            tol["losses_later"]))
    if s.bias_rate > 0:  # +-rate steps from the same loads: the same float32 values
        names = ["final.layers.%d.moe.router.bias" % l for l in s.moe_layers]
        diff = max(max_abs(tensors[q], R[q]) for q in names)
        rows.append(Row("final router biases (balancing)", vs + " (exact)", diff, diff, 0.0, None,
                        "%d updates of +-%g" % (s.S, s.bias_rate)))
    return rows


def fmt(x):
    if x is None:
        return "-"
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return str(x)
    return "%.3e" % x


def print_table(rows, spec, refs, quiet=False, out=sys.stdout):
    info_desc = ("%s vs %s" % (refs["info"][0], refs["main"][0]) if "info" in refs
                 else "(not computed)")
    print("dump: arch=%s dtype=%s param_dtype=%s optim_dtype=%s V=%d Vp=%d C=%d L=%d Hq=%d Hkv=%d D=%d I=%d B=%d T=%d A=%d S=%d"
          % (spec.arch, spec.dtype, spec.param_dtype, spec.optim_dtype, spec.V, spec.Vp, spec.C,
             spec.L, spec.Hq, spec.Hkv, spec.D,
             spec.I, spec.B, spec.T, spec.A, spec.S), file=out)
    if spec.qk_norm or spec.E:
        print("qk_norm=%s" % spec.qk_norm + (
            " moe: E=%d k=%d Ie=%d Is=%d norm_topk=%s MoE layers %s aux_coef=%g z_coef=%g "
            "capacity_factor=%g drop_by_position=%s bias_rate=%g"
            % (spec.E, spec.k, spec.Ie, spec.Is, spec.norm_topk, spec.moe_layers, spec.aux_coef,
               spec.z_coef, spec.capacity_factor, spec.drop_by_position, spec.bias_rate)
            if spec.E else ""), file=out)
    print("info column: same metric for %s" % info_desc, file=out)
    w = max(len(r.quantity) for r in rows)
    wv = max(len(r.vs) for r in rows)
    hdr = "%-*s  %-*s  %10s  %10s  %10s  %-4s  %10s  %s" % (
        w, "quantity", wv, "vs", "max_abs", "rel_err", "tol", "ok", "info", "note")
    print(hdr, file=out)
    print("-" * len(hdr), file=out)
    for r in rows:
        if quiet and r.ok:
            continue
        ok = "-" if r.tol is None else ("ok" if r.ok else "FAIL")
        print("%-*s  %-*s  %10s  %10s  %10s  %-4s  %10s  %s" % (
            w, r.quantity, wv, r.vs, fmt(r.abs_err), fmt(r.rel_err), fmt(r.tol), ok,
            fmt(r.info), r.note), file=out)


def check_file(path, quiet=False, out=sys.stdout):
    """Returns (exit_code, rows)."""
    try:
        tensors, meta = st_io.read(path)
        dtypes = st_io.read_dtypes(path)
    except (st_io.SafetensorsError, OSError) as e:
        print("malformed dump %s: %s" % (path, e), file=out)
        return 2, []
    return check_tensors(tensors, meta, dtypes, quiet=quiet, out=out)


def check_tensors(tensors, meta, dtypes=None, refs=None, quiet=False, out=sys.stdout,
                  with_info=True):
    try:
        spec = rm.Spec.from_metadata(meta)
    except ValueError as e:
        print("bad metadata: %s" % e, file=out)
        return 2, []
    errs = validate(spec, tensors, dtypes)
    if errs:
        for e in errs:
            print("malformed dump: %s" % e, file=out)
        return 2, []
    if refs is None:
        refs = compute_refs(spec, tensors, with_info)
    rows = compare(spec, tensors, refs)
    print_table(rows, spec, refs, quiet=quiet, out=out)
    failed = [r for r in rows if not r.ok]
    if failed:
        print("FAILED %d of %d checks: %s" % (len(failed), len(rows),
                                              ", ".join("%s vs %s" % (r.quantity, r.vs)
                                                        for r in failed)), file=out)
        return 1, rows
    print("all %d checks passed" % sum(1 for r in rows if r.tol is not None), file=out)
    return 0, rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump", help="safetensors file written by loom_refdump")
    ap.add_argument("--quiet", action="store_true", help="print only failing rows")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(args.threads)
    code, _ = check_file(args.dump, quiet=args.quiet)
    return code


if __name__ == "__main__":
    sys.exit(main())
