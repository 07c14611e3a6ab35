#!/usr/bin/python3
"""Docs that run: every `loom ...` command of README.md and docs/*.md, run.

Every fenced block of README.md and docs/*.md is read; each line whose command word is `loom`
(`build/loom`, `loom`, `$ loom`, `mpirun -np N build/loom`; `\\` continuations joined, `&&`
chains split, `# comments` dropped) is one documented command, and it is
  - RUN: in a fresh directory per block (a reader following that snippet), on small demo data
    made here, with the repository's configs; sizes cut small by the table SIZES below
    (training.steps, corpus bytes, VQA samples, ...; every change is listed here and printed);
    placeholders (`<id>`, `CKPT`, `hf_dir/`, ...) replaced by real runs and files that the
    block's PREPARE steps make first. The exit status must be the one the docs state (a
    comment saying "exit N", else 0) and, where EXPECT says so, the output must hold a text;
  - or CHECKED as a synopsis when it holds `[...]`, `...` or `a|b` (a usage line, not a command
    to paste): `loom <command> --help` exits 0 and every --option it names is one the
    command's parser accepts (its hidden --list-options);
  - or SKIPPED, only when SKIP names it, with the reason printed; skipped commands never count
    as passed. Lines that are output shown after a `$ loom ...` prompt are not commands.
A block's other shell lines (tar, VAR=..., kill -9 %1) run as written; a command ending in `&`
runs in the background; `loom runs serve` runs until it prints its URL, then gets Ctrl-C.
A command the docs add later is run by default: it fails here until it runs on the demo data or
is named in SKIP with a reason. About 2-3 minutes on 2 cores.

usage: docs_commands_test.py LOOM [REPO_ROOT]
"""
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

LOOM = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else sys.exit(__doc__)
REPO = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", ".."))

# ---- what the test changes, all in one place ----------------------------------------------------

# Commands not run, with the reason (a regular expression on the command line).
SKIP = [
    (r"hf/Qwen2-0\.5B", "downloads a Hugging Face model (no network here)"),
    (r"qwen_vl_grid\.yaml --launcher local", "96 real VLM trainings, minutes even at 3 steps "
     "(tests/sweep/sweep_vl_real_test.sh trains this sweep file at small size)"),
    (r"tests/e2e/experiment_walkthrough_test\.sh", "a test of its own (CTest e2e_experiment_walkthrough)"),
    (r"scripts/nodes(_slurm)?\.sh|^sinfo\b|--launcher slurm --ntasks-per-node",
     "network namespaces (root) and Slurm daemons inside them: the walkthrough of "
     "docs/MULTINODE.md is CTest comm_multinode_slurm's"),
]

# Small sizes: (regular expression, replacement), applied to every command line in order.
SIZES = [
    (r"--bytes 2000000", "--bytes 100000"),
    (r"--bytes 1000000", "--bytes 60000"),
    (r"--samples (10000|2000) --shard-size (1000|200)", "--samples 400 --shard-size 40"),
    (r"00001800\.", "00000380."),  # a val sample of shard 000009 (400 samples, 40 a shard)
    (r"training\.steps=1000\b", "training.steps=60"),
    (r"training\.steps=1010\b", "training.steps=66"),
    (r"training\.steps=(40|70|100|200|400)\b", "training.steps=6"),
    (r"range\(100,400,100\)", "range(2,6,2)"),
    (r"checkpoint_(30|100)\b", "checkpoint_2"),
    (r"training\.micro_batch_size=8\b", "training.micro_batch_size=1"),  # demo's 16 -> 2
    (r"--port \d+", "--port 0"),
    (r"--model gpt2-124m --batch 8 --seq 1024", "--model tiny-gpt2 --batch 1 --seq 64 --steps 1 "
     "--warmup 0 --no-gemm"),
    (r"^(\S*loom bench)( --nproc 2)?$", r"\1\2 --quick --only memory --quiet"),
]
# Appended to `loom train` / `loom sweep run` of the repository's demo configs (the keys the
# command does not set itself): a few tiny steps instead of hundreds of large ones.
SMALL_TEXT = ["training.steps=4", "training.micro_batch_size=2", "training.seq_len=32",
              "training.eval_every=2", "training.eval_batches=1", "checkpoint.every=2",
              "training.log_every=1", "training.warmup_steps=1"]
SMALL_VQA = ["training.steps=4", "training.micro_batch_size=2", "training.eval_every=2",
             "training.eval_batches=1", "training.log_every=1", "training.warmup_steps=1"]

# Expected outcome beyond the exit status: (regular expression on the command, rc, text in
# stdout+stderr).
EXPECT = [
    (r"train --resme x", 2, "did you mean '--resume'?"),
    (r"runs diff tp2 dp2\b", 0, "SAME"),
]

# Environment of single commands (regular expression, VAR, value).
ENV = [
    # the run killed with kill -9 %1 must still be training then: 100 ms a step
    (r"run\.name=victim training\.steps", "LOOM_FAULT", "slow:0:1"),
]

# Files the docs assume a reader has: made once, copied into every block's directory.
TEXT_RUN = ("{L} train configs/demo.yaml run.name={name} " + " ".join(SMALL_TEXT) + " --quiet")


def prepare_shared(work):
    """Demo data (small), fixtures: run.yaml, val.bin, tok.json, a.txt, b.txt, docs/*.txt,
    prompts.txt, my_schedule.txt, my.sched, shapes.jpg, my_shards/."""
    sh(work, "mkdir -p data/demo docs my_shards && cp -r '%s/configs' configs" % REPO)
    sh(work, "{L} data synth-text --out data/demo/corpus.txt --bytes 120000 --seed 1 && "
       "{L} data train-tokenizer --vocab-size 512 --out data/demo/tokenizer.json data/demo/corpus.txt && "
       "{L} data tokenize --tokenizer data/demo/tokenizer.json --out data/demo/train.bin data/demo/corpus.txt && "
       "{L} data synth-vqa --out data/vqa --samples 400 --shard-size 40 && "
       "{L} data synth-text --out a.txt --bytes 20000 --seed 4 && "
       "{L} data synth-text --out b.txt --bytes 20000 --seed 5 && "
       "{L} data synth-text --out docs/one.txt --bytes 6000 --seed 6 && "
       "{L} data synth-text --out docs/two.txt --bytes 6000 --seed 7 && "
       "cp data/demo/tokenizer.json tok.json && "
       "{L} data tokenize --tokenizer tok.json --out val.bin b.txt && "
       "printf 'Once upon a time\\n\\nThe dog\\n' > prompts.txt && "
       "{L} sched show --pp 2 --microbatches 1 > my_schedule.txt && "
       "{L} sched show --pp 1 --microbatches 1 > my.sched && "
       "tar -xOf data/vqa/000000.tar 00000000.jpg > shapes.jpg && cp data/vqa/00000[0-2].tar my_shards/")
    with open(os.path.join(work, "run.yaml"), "w") as f:
        f.write("# run.yaml of the docs: a tiny GPT-2 on the demo data\n"
                "run: {name: run, output_dir: runs}\n"
                "model: {preset: tiny-gpt2}\n"
                "training: {steps: 4, micro_batch_size: 2, seq_len: 32, log_every: 1,\n"
                "           eval_every: 2, eval_batches: 1, warmup_steps: 1}\n"
                "data: {train_shards: data/demo/train.bin, tokenizer: data/demo/tokenizer.json,\n"
                "       val_fraction: 0.05}\n"
                "checkpoint: {every: 2}\n")


def walk_fixtures(d):
    """configs/walk.yaml and its groups, sweeps/grid.yaml and sweeps/random.yaml: the files the
    walk-through of docs/EXPERIMENTS.md names (as tests/e2e/experiment_walkthrough_test.sh
    writes them)."""
    os.makedirs(os.path.join(d, "sweeps"), exist_ok=True)
    files = {
        "configs/model/mini-gpt2.yaml": "preset: tiny-gpt2\nvocab_size: 512\nhidden: 32\nheads: 4\n"
                                        "layers: 1\nmax_seq: 32\n",
        "configs/model/mini-llama.yaml": "preset: tiny-llama\nvocab_size: 512\nhidden: 32\nheads: 4\n"
                                         "kv_heads: 2\nlayers: 1\nmax_seq: 32\n",
        "configs/walk.yaml": "defaults:\n  - model: mini-gpt2\n  - _self_\n"
                             "run: {name: walk, output_dir: runs}\n"
                             "training: {seq_len: 16, micro_batch_size: 2, steps: 6, log_every: 1, "
                             "grad_clip: 0, warmup_steps: 1}\n"
                             "data: {train_shards: data/demo/train.bin, tokenizer: data/demo/tokenizer.json}\n",
        "sweeps/grid.yaml": "name: wgrid\nbase: ../configs/walk.yaml\nparameters:\n"
                            "  training.lr: {values: [2e-3, 5e-3]}\nstrategy: grid\n",
        "sweeps/random.yaml": "name: wrandom\nbase: ../configs/walk.yaml\nparameters:\n"
                              "  training.lr: {min: 1e-4, max: 1e-2, distribution: log_uniform}\n"
                              "strategy: random\nnum_runs: 2\nseed: 7\n",
    }
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)


def run_id(d, name):
    """The id of the first run named name in d's registry (forks of it may share the name)."""
    out = subprocess.run([LOOM, "runs", "--format", "csv", "--filter", "name = '%s'" % name, "--show",
                          "run_id", "--sort-by", "start_time"], cwd=d, **TXT)
    ids = out.stdout.split()[1:]
    return ids[0] if ids else "NO-RUN-NAMED-" + name


def lr_run(d, lr):
    out = subprocess.run([LOOM, "runs", "--format", "csv", "--sweep", "multirun", "--filter",
                          "training.lr = %s" % lr, "--show", "run_id"], cwd=d, **TXT)
    ids = out.stdout.split()[1:]
    return ids[0] if ids else "NO-RUN-WITH-LR-" + lr


def first_dir(d, pattern):
    found = sorted(glob.glob(os.path.join(d, pattern)), key=os.path.getmtime)
    return os.path.basename(found[0]) if found else "NO-DIR-" + pattern


# What each block needs before it runs, by (file, a regular expression the block's text
# matches): shell steps (run in the block's directory) and placeholders (text -> value, or a
# function of the directory; a placeholder given as a list is used once per occurrence, in
# order). Placeholders of a single command: {"@REGEX": {...}}; "__before__" there: a shell step
# right before that command.
def stopped(name):  # a run interrupted at step 2 (checkpoint_2, steps 4): what --resume continues
    return TEXT_RUN.format(L="{L}", name=name) + " --stop-after 2"


def finished(name):
    return TEXT_RUN.format(L="{L}", name=name)


BLOCKS = {
    ("README.md", r"--resme x"): {
        "prepare": [stopped("base"), finished("done"),
                    "{L} ckpt export runs/done_*/final_checkpoint --out hf"],
        "subst": {"<id>": lambda d: run_id(d, "base"), "hf/my-qwen2": "hf",
                  "@--resume latest": {"__before__": stopped("latest")}},
    },
    ("README.md", r"--prompt-ids"): {
        "prepare": [finished("base"), "{L} train configs/vqa_demo.yaml run.name=vqa " + " ".join(SMALL_VQA) +
                    " --quiet", "{L} ckpt export runs/base_*/final_checkpoint --out hf_dir"],
        "subst": {"<id>": lambda d: run_id(d, "base"), "CKPT": lambda d: "runs/%s/final_checkpoint" % run_id(d, "base"),
                  "@--image": {"<id>": lambda d: run_id(d, "vqa")},
                  "464,3290": "46,329"},  # GPT-2's ids; the demo tokenizer has 512
    },
    ("README.md", r"parallel\.schedule_file=my_schedule"): {"prepare": [finished("base")], "subst": {"<id>": lambda d: run_id(d, "base")}},
    ("README.md", r"runs delete <id>"): {
        "prepare": [finished("base"), finished("other"), finished("doomed"),
                    "{L} train run.yaml +exp.hypothesis=warmup_helps 'run.tags=[ablation]' --quiet",
                    "{L} train run.yaml run.name=tp2 parallel.tp=2 --nproc 2 --quiet",
                    "{L} train run.yaml run.name=dp2 parallel.dp=2 training.micro_batch_size=1 --nproc 2 --quiet"],
        "subst": {"configs/sweeps/<file>.yaml": "configs/sweeps/demo_lr_dtype.yaml",
                  "<tp2 run>": "tp2", "<dp2 run>": "dp2",
                  "@runs delete": {"<id>": lambda d: run_id(d, "doomed")},
                  "<id>": [lambda d: run_id(d, "base"), lambda d: run_id(d, "other")]},
    },
    ("docs/EXPERIMENTS.md", r"checkpoint_30 training\.steps=70"): {"prepare": [stopped("base")], "subst": {"<id>": lambda d: run_id(d, "base")}},
    ("docs/EXPERIMENTS.md", r"runs set-metric ID"): {"prepare": [finished("base")], "subst": {"ID": lambda d: run_id(d, "base")}},
    ("docs/EXPERIMENTS.md", r"runs serve --filter"): {"prepare": [finished("base")]},
    ("docs/EXPERIMENTS.md", r"run\.name=victim"): {
        "prepare": [walk_fixtures],
        "subst": {"victim_<time>_<tag>": "victim_*", "<victim id>": lambda d: first_dir(d, "runs/victim_*"),
                  "<lr 1e-3 run>": lambda d: lr_run(d, "0.001"), "<lr 3e-3 run>": lambda d: lr_run(d, "0.003")},
    },
    ("docs/FORMATS-checkpoint.md", r"init_from=runs/<id>"): {"prepare": [finished("base")], "subst": {"<id>": lambda d: run_id(d, "base")}},
    ("docs/SCHEDULES.md", r"sched validate FILE"): {"subst": {"FILE": "my_schedule.txt"}},
    ("docs/SIMULATOR.md", r"this-machine"): {"prepare": ["{L} bench --quick --only memory --quiet"]},
}

# ---- running ------------------------------------------------------------------------------------
ENVIRON = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NO_COLOR="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
for k in ("LOOM_REGISTRY", "LOOM_SWEEP", "LOOM_SWEEP_ID", "LOOM_FAULT"):
    ENVIRON.pop(k, None)
if os.getuid() == 0:
    ENVIRON.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
TXT = dict(capture_output=True, text=True, errors="replace")  # output as text, whatever its bytes
COUNTS = {"ran": 0, "synopsis": 0, "skipped": 0, "failed": 0}
START = time.time()


def sh(cwd, cmd, env=None, timeout=180):
    cmd = cmd.replace("{L}", shlex.quote(LOOM))
    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env or ENVIRON, **TXT,
                       timeout=timeout)
    if p.returncode:
        raise RuntimeError("setup step failed (exit %d): %s\n%s" % (p.returncode, cmd, p.stderr[-2000:]))
    return p.stdout


def uncomment(line):
    """line without its trailing # comment (outside quotes), and the comment."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def outside_quotes(line):
    out, quote = [], None
    for c in line:
        if quote:
            quote = None if c == quote else quote
            out.append(" ")
        elif c in "'\"":
            quote = c
            out.append(" ")
        else:
            out.append(c)
    return "".join(out)


def split_and(line):
    parts, quote, cur = [], None, ""
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif line.startswith("&&", i):
            parts.append(cur.strip())
            cur, i = "", i + 2
            continue
        cur += c
        i += 1
    parts.append(cur.strip())
    return [p for p in parts if p]


LOOM_WORD = re.compile(r"^(?:mpirun(?: -np \d+)? )?(?:\S*/)?loom(?: |$)")


def is_loom(cmd):
    return bool(LOOM_WORD.match(cmd))


def is_output(cmd):
    """'loom runs serve: http://...' or 'loom runs: --filter: ...': what loom printed."""
    words = cmd.split()
    return any(w.endswith(":") for w in words[:3])


def blocks():
    """(file:line, [(line, comment)]) of every fenced block with a loom command."""
    for path in ["README.md"] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))):
        rel = os.path.relpath(os.path.join(REPO, path), REPO)
        text = open(os.path.join(REPO, rel)).read()
        for m in re.finditer(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M):
            start = text[:m.start()].count("\n") + 1
            raw = m.group(1).split("\n")
            prompt = any(l.startswith("$ ") for l in raw)
            lines, cur = [], ""
            for l in raw:
                if prompt:
                    if not l.startswith("$ "):
                        continue
                    l = l[2:]
                elif l[:1] in (" ", "\t") and lines and not cur:  # a wrapped synopsis or output line
                    body, comment = uncomment(l)
                    if body.strip():
                        lines[-1] = (lines[-1][0] + " " + body.strip(), lines[-1][1] or comment)
                    continue
                body, comment = uncomment(cur + l if cur else l)
                if body.endswith("\\"):
                    cur = body[:-1].rstrip() + " "
                    continue
                cur = ""
                if body.strip():
                    lines.append((body.strip(), comment))
            if any(is_loom(c) for b, _ in lines for c in split_and(b)):
                yield "%s:%d" % (rel, start), lines


def synopsis(cmd):
    bare = outside_quotes(cmd)
    return bool(re.search(r"\[|\.\.\.|\w\|\w|\|\w", bare))


def check_synopsis(where, cmd):
    words = cmd.split()
    i = next(k for k, w in enumerate(words) if re.search(r"(^|/)loom$", w)) + 1
    path = []
    while i < len(words) and re.match(r"^[a-z][a-z-]*$", words[i]) and len(path) < 2:
        path.append(words[i])
        i += 1
    h = subprocess.run([LOOM] + path + ["--help"], **TXT, env=ENVIRON)
    opts = subprocess.run([LOOM] + path + ["--list-options"], **TXT, env=ENVIRON)
    known = {o.rstrip("=") for o in opts.stdout.split()} | {"--help"}
    named = set(re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", outside_quotes(cmd)))
    named = {n for n in named if n.startswith("--") or len(n) == 2}
    unknown = sorted(n for n in named if n not in known)
    ok = h.returncode == 0 and not unknown
    report(where, cmd, "synopsis" if ok else "failed",
           "loom %s --help exit %d%s" % (" ".join(path), h.returncode,
                                         "; options the parser does not take: " + " ".join(unknown) if unknown else
                                         "; %d options accepted" % len(named)))


def report(where, cmd, what, detail=""):
    COUNTS[what] += 1
    tag = {"ran": "ok  ", "synopsis": "syn ", "skipped": "SKIP", "failed": "FAIL"}[what]
    print("%s %-34s %s%s" % (tag, where, cmd, ("\n       " + detail) if detail else ""), flush=True)


def substitute(d, cmd, subst):
    """cmd with the placeholders of subst replaced; the "@REGEX" entries (one command's own
    values) first."""
    for key, val in sorted(subst.items(), key=lambda kv: not kv[0].startswith("@")):
        if key.startswith("@"):
            if re.search(key[1:], cmd):
                cmd = substitute(d, cmd, {k: v for k, v in val.items() if not k.startswith("__")})
            continue
        if isinstance(val, list):
            for v in val:
                if key in cmd:
                    cmd = cmd.replace(key, v(d) if callable(v) else v, 1)
        elif key in cmd:
            cmd = re.sub(r"(?<![\w<])" + re.escape(key) + r"(?![\w>])" if key.isalnum() else re.escape(key),
                         (val(d) if callable(val) else val).replace("\\", "\\\\"), cmd)
    return cmd


def small(cmd):
    for pat, rep in SIZES:
        cmd = re.sub(pat, rep, cmd)
    m = re.search(r"\bloom (train|sweep run) (?:-m )?"
                  r"(configs/(demo|demo_groups|vqa_demo|moe_demo)\.yaml|"
                  r"configs/sweeps/\w+\.yaml)", cmd)
    if m and "--launcher sim" not in cmd:
        extra = SMALL_VQA if "vqa" in m.group(2) else SMALL_TEXT
        add = [kv for kv in extra if kv.split("=")[0] + "=" not in cmd]
        if cmd.endswith(" &"):
            cmd = cmd[:-2] + " " + " ".join(add) + " &"
        else:
            cmd = cmd + " " + " ".join(add)
    return cmd


def expected(cmd, comment):
    for pat, rc, text in EXPECT:
        if re.search(pat, cmd):
            return rc, text
    m = re.search(r"\bexit (\d)\b", comment)
    return (int(m.group(1)) if m else 0), None


def run_serve(d, where, shown, cmd):
    p = subprocess.Popen(["bash", "-c", "exec " + cmd], cwd=d, env=ENVIRON, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, errors="replace")
    url, t0 = None, time.time()
    while time.time() - t0 < 30 and url is None:
        line = p.stdout.readline()
        if not line:
            break
        m = re.search(r"http://[\d.:\[\]]+/", line)
        url = m.group(0) if m else None
    p.send_signal(signal.SIGINT)
    try:
        rc = p.wait(20)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = -9
    report(where, shown, "ran" if url and rc == 0 else "failed",
           "" if url and rc == 0 else "serve: url %s, exit %s after Ctrl-C" % (url, rc))


def run_block(work, where, lines):
    d = os.path.join(work, "b%02d" % len(os.listdir(work)))
    os.makedirs(d)
    for name in ("configs", "data", "docs", "my_shards"):
        shutil.copytree(os.path.join(work, "shared", name), os.path.join(d, name), symlinks=True)
    for name in ("run.yaml", "val.bin", "tok.json", "a.txt", "b.txt", "prompts.txt", "my_schedule.txt", "my.sched",
                 "shapes.jpg"):
        shutil.copy(os.path.join(work, "shared", name), d)
    text = "\n".join(b for b, _ in lines)
    spec = next((v for (f, pat), v in BLOCKS.items() if where.startswith(f + ":") and re.search(pat, text)), {})
    try:
        for step in spec.get("prepare", []):
            step(d) if callable(step) else sh(d, step)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        report(where, "(the block's preparation)", "failed", str(e)[:1500])
        return
    env, jobs = dict(ENVIRON), []
    for body, comment in lines:
        for part in split_and(body):
            if not is_loom(part):
                if re.match(r"^\w+=", part):  # S="..."
                    k, v = part.split("=", 1)
                    env[k] = small(shlex.split(v)[0] if v else "")
                elif part.startswith("kill -9 %"):
                    job = jobs[int(part.split("%")[1]) - 1]
                    name = re.search(r"run\.name=(\w+)", job.args[2]).group(1)
                    t0 = time.time()
                    done = os.path.join(d, "runs", name + "_*", "checkpoint_*", "COMPLETE")
                    while time.time() - t0 < 60 and not glob.glob(done):
                        time.sleep(0.1)
                    job.send_signal(signal.SIGKILL)
                    job.wait()
                elif part.startswith("make demo-data"):
                    pass  # the demo data is this test's (small)
                elif any(re.search(p, part) for p, _ in SKIP):
                    report(where, part, "skipped", next(r for p, r in SKIP if re.search(p, part)))
                else:
                    p = subprocess.run(["bash", "-c", small(part)], cwd=d, env=env, **TXT)
                    if p.returncode:
                        report(where, part, "failed", "a shell step of the block: " + p.stderr[-500:])
                continue
            if is_output(part):
                continue
            skip = next((r for p, r in SKIP if re.search(p, part)), None)
            if skip:
                report(where, part, "skipped", skip)
                continue
            if synopsis(part):
                check_synopsis(where, part)
                continue
            cmd = small(substitute(d, part, spec.get("subst", {})))
            cmd = re.sub(r"(^|(?<=\s))(build/)?loom(?=\s|$)", shlex.quote(LOOM), cmd, count=1)
            left = re.findall(r"<[a-z][^<>]*>", outside_quotes(cmd))
            if left:
                report(where, part, "failed", "placeholder %s: no value for it in BLOCKS of this test" % left[0])
                continue
            for key, val in spec.get("subst", {}).items():
                if key.startswith("@") and re.search(key[1:], part) and "__before__" in val:
                    try:
                        sh(d, val["__before__"])
                    except RuntimeError as e:
                        report(where, part, "failed", str(e))
                        continue
            cenv = dict(env)
            for pat, k, v in ENV:
                if re.search(pat, part):
                    cenv[k] = v
            shown = part if cmd.replace(shlex.quote(LOOM), "loom") == part else \
                part + "\n       as: " + cmd.replace(shlex.quote(LOOM), "loom")
            if cmd.endswith("&"):
                jobs.append(subprocess.Popen(["bash", "-c", "exec " + cmd[:-1]], cwd=d, env=cenv,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                report(where, shown, "ran", "(in the background)")
                continue
            if re.search(r"\bruns serve\b", cmd):
                run_serve(d, where, shown, cmd)
                continue
            want_rc, want_text = expected(part, comment)
            try:
                p = subprocess.run(["bash", "-c", cmd], cwd=d, env=cenv, **TXT,
                                   timeout=240)
                rc, out = p.returncode, p.stdout + p.stderr
            except subprocess.TimeoutExpired:
                rc, out = "timeout", ""
            ok = rc == want_rc and (not want_text or want_text in out)
            report(where, shown, "ran" if ok else "failed",
                   "" if ok else "exit %s (the docs say %d)%s\n%s" % (
                       rc, want_rc, ", output lacks '%s'" % want_text if want_text else "",
                       "\n".join("         | " + l for l in out.strip().split("\n")[-12:])))
    for job in jobs:
        if job.poll() is None:
            job.kill()
            job.wait()


def main():
    work = tempfile.mkdtemp(prefix="loom-docs-test.")
    try:
        os.makedirs(os.path.join(work, "shared"))
        prepare_shared(os.path.join(work, "shared"))
        print("small sizes (the docs' values -> these):")
        for pat, rep in SIZES:
            print("  %-50s -> %s" % (pat, rep))
        print("  loom train/sweep run of configs/demo*.yaml, moe_demo.yaml, vqa_demo.yaml: + " +
              " ".join(SMALL_TEXT))
        for where, lines in blocks():
            run_block(work, where, lines)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("docs_commands_test: %d commands ran as documented, %d synopses checked against the parsers, "
          "%d skipped (not passed), %d failed (%.0f s)" % (COUNTS["ran"], COUNTS["synopsis"], COUNTS["skipped"],
                                                          COUNTS["failed"], time.time() - START))
    return 1 if COUNTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
