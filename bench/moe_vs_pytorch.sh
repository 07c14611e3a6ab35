#!/usr/bin/env bash
# Mixture-of-Experts training step, in one run: (a) loom against a PyTorch peer of the same
# Qwen3-MoE model and batch (bench/torch_moe_step.py: Hugging Face's Qwen3MoeSparseMoeBlock loop
# over experts, torch 1.13, same threads), and (b) loom's MoE step against a loom dense model
# with the same active parameters per token (each MoE layer's k experts of inner size Ie become
# one SwiGLU of inner size k x Ie; issue 25 asks for MoE <= 1.3x dense). Both sides run fp32,
# the optimizer step included (clip 1.0, AdamW), on random tokens (`loom bench model`: no data
# loading). Each case runs --repeats times, the four variants interleaved in every round; a
# run's figure is the median of its timed steps (warm-up steps excluded), the table the median
# over the rounds, and in brackets the fastest step of all rounds (least stretched by load).
# loom profiles one more step of every run (--roofline): its parts by group (MLP, attention,
# optimizer, rest), the median over the rounds, MoE beside dense. Then `loom bench model
# --roofline` once more per model with the GEMM peak and bandwidth measured: the parts losing
# the most time against their bound.
# Not a CTest test: a benchmark on a possibly shared machine (repeat when it is loaded; with
# more threads than free cores, OpenMP barriers of both sides stretch unevenly).
#
# usage: bench/moe_vs_pytorch.sh [path/to/loom] [--cases tiny,small] [--repeats R] [--steps N]
#                                [--threads N] [--no-roofline]
#   tiny:  tiny-qwen3-moe as it is (hidden 128, 4 layers, 8 experts of 96, top 2), 16 x 64
#   small: hidden 512, 4 layers, 8 heads (4 kv) of 64, 32 experts of 384, top 4, 8 x 128
#   defaults: repeats 3, steps 5 (+2 warm-up), threads 1
set -u
LOOM=${1:-build/loom}
[ $# -gt 0 ] && shift
CASES=tiny,small REPEATS=3 STEPS=5 THREADS=1 ROOFLINE=1
while [ $# -gt 0 ]; do
  case $1 in
    --cases) CASES=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --no-roofline) ROOFLINE=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/loom-moe-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

# case -> "B T | dims: hidden layers heads kv_heads head_dim experts top_k moe_intermediate"
case_args() {
  case $1 in
    tiny) echo "16 64 128 4 4 2 48 8 2 96" ;;
    small) echo "8 128 512 4 8 4 64 32 4 384" ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
  esac
}

# loom bench model arguments of a case's MoE (moe) or dense (dense) model
loom_model() { # variant C L H KV D E K IE
  local v=$1 C=$2 L=$3 H=$4 KV=$5 D=$6 E=$7 K=$8 IE=$9
  local dims="model.hidden=$C model.layers=$L model.heads=$H model.kv_heads=$KV model.head_dim=$D"
  if [ "$v" = moe ]; then
    echo "--model tiny-qwen3-moe $dims model.moe.experts=$E model.moe.top_k=$K" \
      "model.moe.intermediate=$IE"
  else # tiny-qwen3: the same model (q/k norms, RMSNorm, SwiGLU), dense; untied like the MoE preset
    echo "--model tiny-qwen3 $dims model.intermediate=$((K * IE)) model.tied_embeddings=false"
  fi
}
torch_model() { # variant C L H KV D E K IE
  local v=$1 C=$2 L=$3 H=$4 KV=$5 D=$6 E=$7 K=$8 IE=$9
  local dims="--hidden $C --layers $L --heads $H --kv-heads $KV --head-dim $D --vocab 512"
  if [ "$v" = moe ]; then echo "$dims --experts $E --top-k $K --moe-intermediate $IE"
  else echo "$dims --experts 0 --intermediate $((K * IE))"; fi
}

cpu() { lscpu | sed -n "s/^$1: *//p"; }
echo "machine: $(cpu 'Model name') (family $(cpu 'CPU family') model $(cpu Model))," \
  "$(nproc --all) cores, $THREADS threads, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$REPEATS"); do
  for c in ${CASES//,/ }; do
    read -r B T C L H KV D E K IE <<<"$(case_args "$c")"
    for v in moe dense; do
      echo "== round $r: $c $v, loom" >&2
      # shellcheck disable=SC2046
      "$LOOM" bench model $(loom_model $v "$C" "$L" "$H" "$KV" "$D" "$E" "$K" "$IE") --batch "$B" \
        --seq "$T" --steps "$STEPS" --warmup 2 --no-gemm --roofline --quiet \
        --json "$WORK/$c.$v.loom.$r.json" >"$WORK/$c.$v.loom.$r.log" 2>&1 ||
        { echo "loom failed on $c $v:" >&2; tail -3 "$WORK/$c.$v.loom.$r.log" >&2; }
      echo "== round $r: $c $v, pytorch" >&2
      # shellcheck disable=SC2046
      /usr/bin/python3 "$HERE/torch_moe_step.py" \
        $(torch_model $v "$C" "$L" "$H" "$KV" "$D" "$E" "$K" "$IE") --batch "$B" --seq "$T" \
        --steps "$STEPS" --warmup 2 --json "$WORK/$c.$v.torch.$r.json" \
        >/dev/null 2>"$WORK/$c.$v.torch.$r.log" ||
        { echo "pytorch failed on $c $v:" >&2; tail -3 "$WORK/$c.$v.torch.$r.log" >&2; }
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$WORK" "$REPEATS" ${CASES//,/ } <<'EOF'
import json, os, statistics, sys
work, repeats, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def runs(c, v, side):
    out = []
    for r in range(1, repeats + 1):
        try:
            out.append(json.load(open(os.path.join(work, f"{c}.{v}.{side}.{r}.json"))))
        except (OSError, ValueError):
            pass
    return out
def ms(js, key="step"):  # median over the runs of each run's median step; the fastest step
    if not js:
        return None, None
    return (statistics.median(1000 * j[key + "_s"] for j in js),
            min(1000 * j[key + "_min_s"] for j in js))
def f(x, fmt="{:.0f}"):
    return "-" if x is None else fmt.format(x)
def cell(m):  # "median (fastest)"
    return f"{f(m[0])} ({f(m[1])})"
def ratio(a, b):  # of the medians (of the fastest steps)
    r = [x / y if x and y else None for x, y in zip(a, b)]
    return f"{f(r[0], '{:.2f}x')} ({f(r[1], '{:.2f}x')})"
TABLES = (("step", "wall time"),
          ("cpu_step", "CPU time of the process (one thread: the step's own time, load aside)"))
for key, what in TABLES:
    print(f"\nms per optimizer step, {what}: the median over the rounds of each run's median "
          "step (in brackets the fastest step of all rounds)")
    print("| case | B x T | params / active per token (M) | loom MoE | loom dense (same active) "
          "| loom MoE / dense | PyTorch MoE | PyTorch dense | PyTorch MoE / dense "
          "| loom MoE speed-up over PyTorch MoE |")
    print("|" + " --- |" * 10)
    for c in cases:
        lm, ld, tm, td = (runs(c, v, s) for v, s in (("moe", "loom"), ("dense", "loom"),
                                                      ("moe", "torch"), ("dense", "torch")))
        a, b, x, y = ms(lm, key), ms(ld, key), ms(tm, key), ms(td, key)
        info = (tm or td or [{}])[0]
        first = (lm or tm or [{"B": "?", "T": "?"}])[0]
        size = "-" if "params" not in info else \
            f"{info['params'] / 1e6:.2f} / {info['active_params'] / 1e6:.2f}"
        print(f"| {c} | {first['B']} x {first['T']} | {size} | {cell(a)} | {cell(b)} | "
              f"{ratio(a, b)} | {cell(x)} | {cell(y)} | {ratio(x, y)} | {ratio(x, a)} |")
# loom's profiled steps (one more step after the timed ones, every round), by group: the
# median over the rounds of each group's time, MoE beside dense (the medians of the groups
# need not add up to the median step)
GROUPS = [("MLP: experts, router, route/permute/combine | fc1, fc2",
           ("experts", "router", "moe ", "fc1", "fc2")),
          ("attention: q/k/v/o GEMMs, attention", ("qkv", "proj", "attention")),
          ("optimizer: AdamW, clipping norm, zeroing", ("adamw", "grad clip", "zero grads")),
          ("rest: norms, activations, embeddings, head, cross-entropy, glue", ("",))]
def group(part):
    return next(name for name, prefixes in GROUPS if part.startswith(prefixes))
for c in cases:
    per = {v: [j["roofline"] for j in runs(c, v, "loom") if "roofline" in j]
           for v in ("moe", "dense")}
    if not per["moe"] or not per["dense"]:
        continue
    print(f"\n{c}: loom's profiled steps by group, ms: MoE | dense | MoE - dense, the median of "
          f"{len(per['moe'])} rounds (the fastest)")
    for g, _ in GROUPS + [("step", ())]:
        t = {v: [1000 * sum(r["seconds"] for r in rows if g == "step" or group(r["part"]) == g)
                 for rows in per[v]] for v in per}
        m = {v: (statistics.median(t[v]), min(t[v])) for v in t}
        extra = (f"  MoE / dense {m['moe'][0] / m['dense'][0]:.2f}x "
                 f"({m['moe'][1] / m['dense'][1]:.2f}x)" if g == "step" else "")
        print(f"  {g:<62} {m['moe'][0]:7.1f} ({m['moe'][1]:7.1f}) {m['dense'][0]:7.1f} "
              f"({m['dense'][1]:7.1f}) {m['moe'][0] - m['dense'][0]:+7.1f} "
              f"({m['moe'][1] - m['dense'][1]:+7.1f}){extra}")
EOF
[ "$ROOFLINE" = 1 ] || exit 0
for c in ${CASES//,/ }; do
  read -r B T C L H KV D E K IE <<<"$(case_args "$c")"
  for v in moe dense; do
    echo "== roofline: $c $v" >&2
    # shellcheck disable=SC2046
    "$LOOM" bench model $(loom_model $v "$C" "$L" "$H" "$KV" "$D" "$E" "$K" "$IE") --batch "$B" \
      --seq "$T" --steps 3 --warmup 2 --roofline --out "$WORK/profile.yaml" \
      --json "$WORK/$c.$v.roofline.json" >"$WORK/$c.$v.roofline.log" 2>&1 ||
      { echo "loom failed on the $c $v roofline" >&2; continue; }
  done
done
/usr/bin/python3 - "$WORK" ${CASES//,/ } <<'EOF'
import json, os, sys
work, cases = sys.argv[1], sys.argv[2:]
for c in cases:
    for v in ("moe", "dense"):
        try:
            j = json.load(open(os.path.join(work, f"{c}.{v}.roofline.json")))
        except (OSError, ValueError):
            continue
        rows = sorted(j.get("roofline", []), key=lambda r: -r["seconds"])
        print(f"\n{c} {v}: profiled step {j['roofline_step_s'] * 1000:.0f} ms (median step "
              f"{j['step_s'] * 1000:.0f} ms); fp32 GEMM peak {j['gemm_peak_gflops']:.1f} GFLOP/s; "
              "parts by time:")
        for r in rows[:12]:
            frac = "-" if r["fraction"] is None else f"{100 * r['fraction']:.1f}%"
            lost = "-" if r["lost_s"] is None else f"{1000 * r['lost_s']:.1f}"
            print(f"  {r['part']:<15} {1000 * r['seconds']:8.1f} ms {100 * r['share']:5.1f}%"
                  f"  of bound {frac:>6}  lost {lost:>7} ms  {r['note']}")
EOF
