#!/usr/bin/python3
"""The simulator replays context parallelism (ring attention) and Ulysses x TP as the trainer runs
them, on 2-4 ranks of this machine.

For each layout, `mpirun loom train --trace` runs one step and `loom sim` simulates the same
config, then:
  * the instruction order on every rank's compute row is the same in both Chrome traces;
  * the bytes each rank sends per step, by kind of collective, equal the trainer's comm.json
    (both count comm.h's ring accounting; within 0.5% + 256 B for the flat buffer's 16-float
    alignment, as sim_vs_train_test.py);
  * the ring's point-to-point bytes (cp) and the Ulysses all-to-all bytes (sp x tp) equal the
    closed forms below, written from the model dimensions alone (exact: the same integers).

Only what is deterministic is asserted here; the step times of the same layouts against this
machine (a `loom bench` profile, within 15% on an idle machine) are a benchmark:
bench/sim_vs_train.sh (the "long llama" cases), docs/SIMULATOR.md "Calibration of this machine".

usage: sim_vs_train_cp_test.py path/to/loom
"""
import json
import os
import sys
import tempfile

LOOM = os.path.abspath(sys.argv[1])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sim_train_common import KINDS, Checks, compute_order, mpi_env, runner  # noqa: E402

ENV = mpi_env(OMP_WAIT_POLICY="passive")
F = 4  # bytes per float: the trainer's activations and their exchanges are fp32
check = Checks()
run = runner(ENV)


def model(kind, L, C, H, KV, T, B, A):
    """overrides for a tiny GPT-2 or Llama of the given shape"""
    if kind == "gpt":
        m = ["model.preset=tiny-gpt2", "model.vocab_size=300"]
    else:
        m = ["model.preset=tiny-llama", "model.vocab_size=301", "model.vocab_pad_multiple=1",
             f"model.kv_heads={KV}"]
    return m + [f"model.layers={L}", f"model.hidden={C}", f"model.heads={H}",
                f"model.intermediate={2 * C}", f"model.max_seq={max(T, 64)}",
                f"training.seq_len={T}", f"training.micro_batch_size={B}",
                f"training.grad_accum={A}"]


def ring_bytes(L, C, H, KV, T, B, A, cp, tp, sp, recompute):
    """send/recv bytes per rank per step of the cp ring (src/comm/ring_attention.c): a hop
    carries K and V of the rank's B*T/cp tokens x KV/(tp*sp) heads (Ulysses: the attention
    layout) x head_dim; per layer and micro-batch cp-1 hops forward, cp-1 hops of K/V and cp-1
    of the dK/dV accumulators backward, and the forward's again when the layer is recomputed"""
    D = C // H
    hop = 2 * (B * T // cp) * (KV // (tp * sp)) * D * F
    per_layer = (cp - 1) * hop * (2 if recompute else 1) + 2 * (cp - 1) * hop
    return A * L * per_layer


def a2a_bytes(L, C, H, KV, T, B, A, sp, tp, cp):
    """all-to-all bytes per rank per step of Ulysses x TP (x cp): per layer 4 exchanges forward
    (q, k, v, out) and 4 backward of the rank's B*T/(cp*sp) tokens x (H or KV)/tp heads x
    head_dim, each counted (sp-1)/sp of it"""
    D = C // H
    per_layer = 2 * (sp - 1) / sp * (B * T // (cp * sp)) * D * (2 * H + 2 * KV) // tp * F
    return A * L * per_layer


def main():
    work = tempfile.mkdtemp(prefix="loom-simcp.")
    corpus, tok, data = (os.path.join(work, f) for f in ("corpus.txt", "tok.json", "train.bin"))
    for args in (["data", "synth-text", "--out", corpus, "--bytes", "200000", "--seed", "3"],
                 ["data", "train-tokenizer", "--vocab-size", "300", "--out", tok, corpus],
                 ["data", "tokenize", "--tokenizer", tok, "--out", data, corpus]):
        r = run([LOOM] + args)
        if r.returncode:
            print("could not make test data:", r.stderr, file=sys.stderr)
            return 1
    common = ["training.steps=1", "data.train_shards=" + data, "checkpoint.every=0",
              "checkpoint.save_final=false"]
    # (name, ranks, model kind and shape, overrides, closed form)
    G = ("gpt", 2, 64, 4, 4, 32, 4, 2)      # kind, L, C, H, KV, T, B, A
    G2 = ("gpt", 2, 64, 4, 4, 32, 2, 2)     # 2 sequences per micro-batch and dp rank
    LL = ("llama", 2, 64, 8, 4, 32, 2, 3)
    # (name, ranks, model kind and shape, overrides, degrees for the closed forms)
    cases = [
        ("cp2", 2, G, ["parallel.cp=2"], dict(cp=2)),
        ("cp4", 4, G, ["parallel.cp=4"], dict(cp=4)),
        ("llama gqa cp2", 2, LL, ["parallel.cp=2"], dict(cp=2)),
        ("cp2 recompute", 2, G, ["parallel.cp=2", "training.activation_checkpointing=true"],
         dict(cp=2, rec=True)),
        ("cp2 tp2", 4, G, ["parallel.cp=2", "parallel.tp=2"], dict(cp=2, tp=2)),
        ("cp2 dp2", 4, G2, ["parallel.cp=2", "parallel.dp=2", "parallel.zero=1"], dict(cp=2)),
        ("llama gqa cp2 sp2", 4, LL, ["parallel.cp=2", "parallel.sp=2"], dict(cp=2, sp=2)),
        ("ulysses sp2 tp2", 4, G, ["parallel.sp=2", "parallel.tp=2"], dict(sp=2, tp=2)),
        ("llama gqa sp2 tp2", 4, LL, ["parallel.sp=2", "parallel.tp=2"], dict(sp=2, tp=2)),
    ]
    for name, np_, shape, over, form in cases:
        kind, L, C, H, KV, T, B, A = shape
        args = model(kind, L, C, H, KV, T, B, A) + common + over
        out = os.path.join(work, name.replace(" ", "_"))
        tt, st, sj = out + ".train.json", out + ".sim.json", out + ".metrics.json"
        r = run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np_), LOOM, "train"] +
                args + ["run.name=t", "run.output_dir=" + out, "--quiet", "--trace", tt], timeout=300)
        if r.returncode:
            check(False, f"{name}: loom train failed: {r.stdout[-500:]}{r.stderr[-500:]}")
            continue
        r = run([LOOM, "sim"] + args + ["--hardware", "h100-sxm", "--gpus", str(np_), "--trace",
                                        st, "--json", sj])
        if r.returncode:
            check(False, f"{name}: loom sim failed: {r.stderr}")
            continue
        a, b = compute_order(tt), compute_order(st)
        check(sorted(a) == sorted(b), f"{name}: ranks in the traces: {sorted(a)} {sorted(b)}")
        for pid in sorted(a):
            check(a[pid] == b.get(pid), f"{name}: rank {pid}: instruction order differs:\n"
                  f"  train: {a[pid]}\n  sim:   {b.get(pid)}")
        run_dir = [d for d in os.listdir(out) if d.startswith("t_")][0]
        train_bytes = json.load(open(os.path.join(out, run_dir, "comm.json")))["bytes_per_step"]
        stages = json.load(open(sj))["stages"]
        per_stage = np_ // len(stages)
        for rank in range(np_):
            got, want = stages[rank // per_stage], train_bytes[rank]
            for k in KINDS:
                ok = abs(got[k] - want[k]) <= 0.005 * want[k] + 256
                check(ok, f"{name}: rank {rank} {k}: simulated {got[k]:.0f} bytes, trainer {want[k]:.0f}")
        cp, sp, tp, rec = form.get("cp", 1), form.get("sp", 1), form.get("tp", 1), form.get("rec", False)
        forms = []
        if cp > 1:
            forms.append(("send/recv", ring_bytes(L, C, H, KV, T, B, A, cp, tp, sp, rec)))
        if sp > 1:
            forms.append(("all-to-all", a2a_bytes(L, C, H, KV, T, B, A, sp, tp, cp)))
        for key, want in forms:
            for rank in range(np_):
                got_t, got_s = train_bytes[rank][key], stages[rank // per_stage][key]
                check(got_t == want and got_s == want, f"{name}: rank {rank} {key}: trainer "
                      f"{got_t:.0f}, simulator {got_s:.0f}, closed form {want:.0f}")
        print(f"{name}: instruction order, bytes per collective and the closed forms ("
              + ", ".join(f"{k} {w:.0f} B" for k, w in forms) + " per rank per step) match")

    # what the simulator does not model is refused, naming the key; what the trainer refuses
    # the simulator refuses with the trainer's message
    for ranks, over, msg in (
            (2, ["model.preset=tiny-qwen2.5-vl", "training.seq_len=48", "parallel.cp=2"],
             "does not model context parallelism in a vision-language model"),
            (2, ["model.preset=tiny-gpt2", "training.seq_len=30", "parallel.cp=2"],
             "training.seq_len (30) must be divisible by 4"),
            (8, ["model.preset=tiny-gpt2", "training.seq_len=12", "parallel.cp=2", "parallel.sp=4"],
             "must divide the training.seq_len / parallel.cp = 12 / 2 = 6 tokens"),
            (4, ["model.preset=tiny-llama", "parallel.sp=2", "parallel.tp=2"],
             "model.kv_heads/tp = 2/2 = 1")):
        r = run([LOOM, "sim"] + over + ["--hardware", "h100-sxm", "--gpus", str(ranks)])
        check(r.returncode != 0 and msg in r.stderr, f"loom sim {' '.join(over)}: exit "
              f"{r.returncode}, expected '{msg}' in: {r.stderr.strip()}")

    return check.summary("sim_vs_train_cp_test")


if __name__ == "__main__":
    sys.exit(main())
