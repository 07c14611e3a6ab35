"""What the two simulator-against-trainer tests share (sim_vs_train_test.py and
sim_vs_train_cp_test.py): the environment of multi-rank runs as root on 2 cores, the
collective kinds of comm.json, a pass/fail counter, a subprocess runner, and the compute
rows of a Chrome trace in time order."""
import json
import os
import subprocess
import sys

KINDS = ["all-reduce", "reduce-scatter", "all-gather", "all-to-all", "send/recv"]


def mpi_env(**extra):
    """os.environ plus what `loom train --nproc` sets for single-threaded ranks as root"""
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1",
                OPENBLAS_NUM_THREADS="1", **extra)


class Checks:
    """check(cond, what) counts; summary(name) prints 'N passed, M failed', returns the exit code"""

    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL:", what, file=sys.stderr)

    def summary(self, name):
        print(f"{name}: {self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


def runner(env):
    """run(args, **kw): subprocess.run with env, text output captured"""
    return lambda args, **kw: subprocess.run(args, env=env, capture_output=True, text=True, **kw)


def compute_order(trace_path):
    """{pid: [instruction text, ...]} of the compute rows, in time order"""
    events = json.load(open(trace_path))["traceEvents"]
    rows = {}
    for i, e in enumerate(events):
        if e.get("ph") == "X" and e.get("tid") == 0:
            rows.setdefault(e["pid"], []).append((e["ts"], i, e["name"]))
    return {pid: [n for _, _, n in sorted(v)] for pid, v in rows.items()}
