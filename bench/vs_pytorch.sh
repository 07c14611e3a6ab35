#!/usr/bin/env bash
# loom against PyTorch on this machine, in one run: for each case (model, B, T, dtype) run
# `loom bench model` and bench/torch_step.py with the same threads, steps and AdamW, then print
# the table of step times, tokens/s, loom/PyTorch ratios, loom's MFU against the GEMM peak it
# measured, and peak resident memory. Medians of the timed steps (first steps are warm-up).
# loom also profiles one more step (--roofline): after the table, each case's parts that lose
# the most time against their bound (GEMM peak of the dtype, streaming bandwidth).
# Not a CTest test: a benchmark on a possibly shared machine (repeat when it is loaded).
#
# usage: bench/vs_pytorch.sh [path/to/loom] [--cases LIST] [--steps N] [--threads N]
#   LIST: comma-separated of small (gpt2-124m 4x64 fp32), large (gpt2-124m 8x1024 fp32),
#         large-bf16 (gpt2-124m 8x1024 bf16), qwen-bf16 (qwen2.5-0.5b 4x512 bf16), qwen-fp32
#         (default: small,large,large-bf16,qwen-bf16)
# env: ONEDNN_MAX_CPU_ISA is left to the caller; loom raises oneDNN's cap to AMX itself and
#      this script sets AVX512_CORE_AMX for PyTorch unless already set ("AMX on for both").
set -u
LOOM=${1:-build/loom}
[ $# -gt 0 ] && shift
CASES=small,large,large-bf16,qwen-bf16 STEPS=3 THREADS=$(nproc)
while [ $# -gt 0 ]; do
  case $1 in
    --cases) CASES=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/loom-vs-torch.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
export ONEDNN_MAX_CPU_ISA_TORCH=${ONEDNN_MAX_CPU_ISA:-AVX512_CORE_AMX}

case_args() {
  case $1 in
    small) echo "gpt2-124m 4 64 fp32" ;;
    large) echo "gpt2-124m 8 1024 fp32" ;;
    large-bf16) echo "gpt2-124m 8 1024 bf16" ;;
    qwen-bf16) echo "qwen2.5-0.5b 4 512 bf16" ;;
    qwen-fp32) echo "qwen2.5-0.5b 4 512 fp32" ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
  esac
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $THREADS threads, load $(cut -d' ' -f1-3 /proc/loadavg)"
for c in ${CASES//,/ }; do
  read -r model B T dtype <<<"$(case_args "$c")"
  echo "== $c: $model B=$B T=$T $dtype" >&2
  "$LOOM" bench model --model "$model" --batch "$B" --seq "$T" --dtype "$dtype" \
    --steps "$STEPS" --warmup 1 --roofline --json "$WORK/$c.loom.json" \
    --out "$WORK/$c.profile.yaml" >&2 ||
    { echo "loom failed on $c" >&2; continue; }
  ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA_TORCH /usr/bin/python3 "$HERE/torch_step.py" \
    --model "$model" --batch "$B" --seq "$T" --dtype "$dtype" --steps "$STEPS" --warmup 1 \
    --json "$WORK/$c.torch.json" >/dev/null || { echo "pytorch failed on $c" >&2; continue; }
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$WORK" ${CASES//,/ } <<'EOF'
import json, os, sys
work, cases = sys.argv[1], sys.argv[2:]
print("| case | model | B x T | dtype | loom step s | PyTorch step s | loom tok/s | PyTorch tok/s "
      "| ratio | loom GFLOP/s | loom MFU | GEMM peak GFLOP/s | loom RSS GiB | PyTorch RSS GiB |")
print("|" + " --- |" * 14)
for c in cases:
    try:
        l = json.load(open(os.path.join(work, c + ".loom.json")))
        t = json.load(open(os.path.join(work, c + ".torch.json")))
    except OSError:
        print(f"| {c} | (failed) |" + " |" * 12)
        continue
    print(f"| {c} | {l['model']} | {l['B']} x {l['T']} | {l['dtype']} | {l['step_s']:.3f} | "
          f"{t['step_s']:.3f} | {l['tokens_s']:.1f} | {t['tokens_s']:.1f} | "
          f"{l['tokens_s'] / t['tokens_s']:.2f}x | {l['flops_s'] / 1e9:.1f} | {100 * l['mfu']:.1f}% | "
          f"{l['gemm_peak_gflops']:.1f} | {l['peak_rss_gib']:.2f} | {t['peak_rss_gib']:.2f} |")
for c in cases:
    try:
        l = json.load(open(os.path.join(work, c + ".loom.json")))
    except OSError:
        continue
    rows = sorted(l.get("roofline", []), key=lambda r: -(r["lost_s"] or 0))[:6]
    print(f"\n{c}: profiled step {l.get('roofline_step_s', 0):.3f} s; most time lost against the bound:")
    for r in rows:
        frac = "-" if r["fraction"] is None else f"{100 * r['fraction']:.1f}%"
        print(f"  {r['part']:<16} {r['seconds']:8.3f} s  {100 * r['share']:5.1f}%  of bound {frac:>6}"
              f"  lost {'-' if r['lost_s'] is None else format(r['lost_s'], '.3f')} s  {r['note']}")
EOF
