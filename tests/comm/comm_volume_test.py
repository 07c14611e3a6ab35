#!/usr/bin/python3
"""Communication volume per step per rank equals the analytic count for each strategy.

Runs `loom train` under mpirun for several layouts of a tiny GPT-2, reads the run's comm.json
(bytes each rank sent per step, counted in loom's collectives layer with ring-algorithm
accounting: all-reduce 2(p-1)/p n, reduce-scatter and all-gather (p-1)/p n of the full buffer,
all-to-all (p-1)/p n, send n) and compares with the closed forms below, written from the model
dimensions alone. Exact equality is expected: both sides count the same bytes.

usage: comm_volume_test.py path/to/loom
"""
import json
import os
import subprocess
import sys
import tempfile

LOOM = sys.argv[1]
V, C, L, H, I, T, B, A, MAXSEQ = 300, 64, 2, 4, 128, 32, 4, 2, 64
VP = 320  # padded to a multiple of 64
D = C // H
N = B * T
F = 4  # bytes per float

def layout_total(tp=1):
    """floats in the flat buffer: every tensor rounded up to 16 floats (see layout.c)"""
    r16 = lambda n: (n + 15) // 16 * 16
    t = r16(VP // tp * C) + r16(MAXSEQ * C)
    per_layer = [C, C, C * C // tp, C // tp, C * C // tp, C // tp, C * C // tp, C // tp,
                 C * C // tp, C, C, C, I * C // tp, I // tp, C * I // tp, C]
    t += L * sum(r16(x) for x in per_layer)
    return t + r16(C) + r16(C)

KINDS = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "send/recv")

def ring_allreduce(n, p): return 2 * (p - 1) / p * n * F
def ring_part(n, p): return (p - 1) / p * n * F  # reduce-scatter / all-gather / all-to-all

def expected(case):
    z = {"all-reduce": 0.0, "reduce-scatter": 0.0, "all-gather": 0.0, "all-to-all": 0.0,
         "send/recv": 0.0}
    ranks = []
    kind = case["kind"]
    if kind == "dp2":
        z["all-reduce"] = ring_allreduce(layout_total(), 2)
        ranks = [z, dict(z)]
    elif kind in ("zero1", "zero2"):
        P = layout_total()
        rs = ring_part(P, 2) * (A if kind == "zero2" else 1)  # ZeRO-2: after every micro-batch
        z["reduce-scatter"], z["all-gather"] = rs, ring_part(P, 2)
        ranks = [z, dict(z)]
    elif kind == "zero3":
        # parameters gathered per use: each block twice per micro-batch (forward, backward),
        # the ends (embedding+positions, final norm) three times (embedding forward, head
        # forward, head backward); block gradients reduce-scattered after every micro-batch,
        # the ends' once per step
        r16 = lambda n: (n + 15) // 16 * 16
        ends = r16(VP * C) + r16(MAXSEQ * C) + 2 * r16(C)
        blocks = layout_total() - ends
        z["all-gather"] = ring_part(A * (2 * blocks + 3 * ends), 2)
        z["reduce-scatter"] = ring_part(A * blocks + ends, 2)
        ranks = [z, dict(z)]
    elif kind == "tp2":
        # per micro-batch: embedding, 2 per block forward, 2 per block backward, head backward
        # (N x C each), and the vocab-parallel softmax max (N) and sum/target (2N)
        per_mb = ring_allreduce((2 + 4 * L) * N * C, 2) + ring_allreduce(N, 2) + ring_allreduce(2 * N, 2)
        z["all-reduce"] = A * per_mb
        ranks = [z, dict(z)]
    elif kind == "tp2_sp":
        # forward: embedding reduce-scatter, per block 2 all-gathers + 2 reduce-scatters, head
        # all-gather; backward: per block 2 all-gathers + 2 reduce-scatters, head reduce-scatter,
        # embedding all-gather; all on N x C. Softmax statistics stay all-reduces. Once per step:
        # gradients of tp-replicated tensors (6C per block, positions, final norm) all-reduced.
        z["reduce-scatter"] = A * ring_part((2 + 4 * L) * N * C, 2)
        z["all-gather"] = A * ring_part((2 + 4 * L) * N * C, 2)
        z["all-reduce"] = A * (ring_allreduce(N, 2) + ring_allreduce(2 * N, 2)) + \
            ring_allreduce(6 * C * L + MAXSEQ * C + 2 * C, 2)
        ranks = [z, dict(z)]
    elif kind == "ulysses2":
        # per block 8 all-to-alls (q, k, v, out forward; their gradients backward) of B*T*H*D/sp
        # values per rank, plus the gradient all-reduce over the two sequence replicas
        z["all-to-all"] = A * L * 8 * ring_part(N * H * D // 2, 2)
        z["all-reduce"] = ring_allreduce(layout_total(), 2)
        ranks = [z, dict(z)]
    elif kind == "ulysses2_tp2":
        # Ulysses x TP, rank = sp_rank * 2 + tp_rank: tp splits the heads first (H/tp per rank),
        # the all-to-all then runs over the sp pair on the rank's N/sp tokens x H/tp heads:
        # per block 8 all-to-alls of (N/sp)(H/tp)D values, each counted (sp-1)/sp of it.
        # The tp all-reduces of tp2 run on the N/sp local rows; the gradients of the rank's
        # tp shard are all-reduced over the two sequence replicas.
        sp, tp = 2, 2
        z["all-to-all"] = A * L * 8 * ring_part(N // sp * (H // tp) * D, sp)
        z["all-reduce"] = A * (ring_allreduce((2 + 4 * L) * (N // sp) * C, tp) +
                               ring_allreduce(N // sp, tp) + ring_allreduce(2 * N // sp, tp)) + \
            ring_allreduce(layout_total(tp), sp)
        ranks = [z, dict(z), dict(z), dict(z)]
    elif kind in ("cp2", "cp4"):
        # ring attention, per layer and micro-batch: forward, cp-1 hops of this rank's K and V
        # blocks (B*T/cp tokens x kv heads x D each): 2 (cp-1)/cp B T Hkv D floats; backward the
        # K/V blocks again plus the dK/dV accumulators travelling back (cp-1 hops each): twice
        # that. Then the gradient all-reduce over the cp replicas (cp is a replica axis, like dp).
        cp = int(kind[2:])
        fwd = 2 * (cp - 1) / cp * B * T * H * D * F  # GPT-2: kv heads = heads
        z["send/recv"] = A * L * 3 * fwd
        z["all-reduce"] = ring_allreduce(layout_total(), cp)
        ranks = [dict(z) for _ in range(cp)]
    elif kind == "pp2":
        first, last = dict(z), dict(z)
        first["send/recv"] = A * N * C * F  # activations forward
        last["send/recv"] = A * N * C * F   # their gradients back
        tied = ring_allreduce(VP * C, 2)    # tied embedding gradients, first <-> last stage
        first["all-reduce"] = last["all-reduce"] = tied
        ranks = [first, last]
    return ranks

CASES = [
    {"kind": "dp2", "np": 2, "args": ["parallel.dp=2", "training.micro_batch_size=2"]},
    {"kind": "zero1", "np": 2, "args": ["parallel.dp=2", "parallel.zero=1", "training.micro_batch_size=2"]},
    {"kind": "zero2", "np": 2, "args": ["parallel.dp=2", "parallel.zero=2", "training.micro_batch_size=2"]},
    {"kind": "zero3", "np": 2, "args": ["parallel.dp=2", "parallel.zero=3", "training.micro_batch_size=2"]},
    {"kind": "tp2", "np": 2, "args": ["parallel.tp=2"]},
    {"kind": "tp2_sp", "np": 2, "args": ["parallel.tp=2", "parallel.sp_mode=megatron"]},
    {"kind": "ulysses2", "np": 2, "args": ["parallel.sp=2"]},
    {"kind": "pp2", "np": 2, "args": ["parallel.pp=2"]},
    {"kind": "ulysses2_tp2", "np": 4, "args": ["parallel.sp=2", "parallel.tp=2"]},
    {"kind": "cp2", "np": 2, "args": ["parallel.cp=2"]},
    {"kind": "cp4", "np": 4, "args": ["parallel.cp=4"]},
]

def main():
    work = tempfile.mkdtemp(prefix="loom-comm-")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    run = lambda *a: subprocess.run(a, check=True, env=env, stdout=subprocess.DEVNULL)
    run(LOOM, "data", "synth-text", "--out", f"{work}/c.txt", "--bytes", "60000", "--seed", "5")
    run(LOOM, "data", "train-tokenizer", "--vocab-size", str(V), "--out", f"{work}/tok.json", f"{work}/c.txt")
    run(LOOM, "data", "tokenize", "--tokenizer", f"{work}/tok.json", "--out", f"{work}/t.bin", f"{work}/c.txt")
    base = ["model.preset=tiny-gpt2", f"model.vocab_size={V}", f"model.hidden={C}",
            f"model.layers={L}", f"model.heads={H}", f"model.intermediate={I}",
            f"model.max_seq={MAXSEQ}", f"training.seq_len={T}", f"training.micro_batch_size={B}",
            f"training.grad_accum={A}", "training.steps=2", f"data.train_shards={work}/t.bin",
            "checkpoint.save_final=false", "--quiet"]
    passed = failed = 0
    for case in CASES:
        out = f"{work}/{case['kind']}"
        cmd = ["mpirun", "--oversubscribe", "-np", str(case["np"]), LOOM, "train", *base,
               f"run.output_dir={out}", *case["args"]]
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, timeout=300)
        rundir = [os.path.join(out, d) for d in os.listdir(out) if os.path.isdir(os.path.join(out, d))][0]
        got = json.load(open(os.path.join(rundir, "comm.json")))["bytes_per_step"]
        want = expected(case)
        for r, (g, w) in enumerate(zip(got, want)):
            for k, v in w.items():
                if abs(g[k] - v) <= 0.5:
                    passed += 1
                else:
                    failed += 1
                    print(f"FAIL {case['kind']} rank {r} {k}: counted {g[k]:.0f} bytes/step, "
                          f"analytic {v:.0f}")
        # the split by communicator and node adds up to the bytes by kind; one node: all intra
        for r, g in enumerate(got):
            kinds = sum(g[k] for k in KINDS)
            axes = sum(a["intra_node"] + a["inter_node"] for a in g["axes"].values())
            if abs(g["intra_node"] + g["inter_node"] - kinds) <= 0.5 * len(KINDS) and \
               abs(axes - kinds) <= 0.5 * len(KINDS) and g["inter_node"] == 0:
                passed += 1
            else:
                failed += 1
                print(f"FAIL {case['kind']} rank {r}: intra {g['intra_node']:.0f} + inter "
                      f"{g['inter_node']:.0f} (axes {axes:.0f}) != {kinds:.0f} bytes/step by kind")
        print(f"{case['kind']:9s} rank 0: " + ", ".join(f"{k} {int(got[0][k])}" for k in KINDS if got[0][k])
              + "; " + ", ".join(f"{a} {int(v['intra_node'])}" for a, v in got[0]["axes"].items()))
    print(f"comm_volume_test: {passed} passed, {failed} failed")
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
