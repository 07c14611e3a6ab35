#!/usr/bin/env bash
# `loom bench model --roofline` as a user runs it, on tiny GPT-2 in fp32 and bf16 without the
# GEMM and bandwidth measurements (--no-gemm): the table ends with the bottleneck line; the
# JSON's roofline rows cover the GEMM roles, attention, norms, AdamW (and bf16 conversions in
# bf16 only), sum to the profiled step, carry no fraction (nothing measured) but a note each;
# no MFU is printed (none measured: null in the JSON, not 0%); a misspelt option is refused
# with a suggestion and exit 2, and so is a LOOM_GEMM_PACK or LOOM_GEMM_RAGGED that is not 0
# or 1 and a LOOM_SIMD that names no code path (LOOM_SIMD=avx2 runs the AVX2 kernels). An MoE preset changed by model.KEY=VALUE arguments profiles its MoE kernels as parts
# of their own; other keys and misspelt ones are refused with exit 2.
# usage: bench_roofline_test.sh LOOM
. "$(dirname "$0")/../assert.sh"
LOOM=$1
WORK=$(mktemp -d /tmp/loom-roofline.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
for dt in fp32 bf16; do
  if ! "$LOOM" bench model --model tiny-gpt2 --batch 2 --seq 32 --steps 1 --warmup 1 \
    --dtype $dt --no-gemm --roofline --json "$WORK/$dt.json" >"$WORK/$dt.txt" 2>&1; then
    fail "bench model --roofline $dt"; tail -5 "$WORK/$dt.txt" >&2; continue
  fi
  # without bounds only the unattributed rest has a known loss
  check "$dt: bottleneck line" grep -q "^bottleneck: unattributed loses .* against its bound" "$WORK/$dt.txt"
  check "$dt: table header" grep -q "part .*time s .*work .*of bound" "$WORK/$dt.txt"
  # no peak measured: no MFU printed (not "MFU 0.0%"), null in the JSON
  check "$dt: no MFU without a measured peak" bash -c '! grep -q "MFU" "$1"' _ "$WORK/$dt.txt"
  check "$dt: JSON rows" /usr/bin/python3 - "$WORK/$dt.json" "$dt" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); dt = sys.argv[2]
rows = {r["part"]: r for r in j["roofline"]}
need = ["qkv fwd", "qkv dgrad", "qkv wgrad", "proj fwd", "fc1 fwd", "fc2 wgrad", "lm head fwd",
        "attention fwd", "attention bwd", "norms", "activations", "cross-entropy", "embeddings",
        "adamw", "grad clip norm", "zero grads", "unattributed"]
missing = [p for p in need if p not in rows]
assert not missing, f"missing parts {missing}"
assert ("bf16 convert" in rows) == (dt == "bf16"), "bf16 conversions only in bf16"
assert j["mfu"] is None and j["gemm_peak_gflops"] is None, (j["mfu"], j["gemm_peak_gflops"])
total = sum(r["seconds"] for r in j["roofline"])
assert abs(total - j["roofline_step_s"]) <= 1e-4 * j["roofline_step_s"] + 1e-5, (total, j["roofline_step_s"])
for r in j["roofline"]:
    assert r["fraction"] is None and r["note"], r   # --no-gemm: no bound measured
    if r["part"] == "unattributed":  # no work: all of its time is lost
        assert abs(r["lost_s"] - r["seconds"]) <= 1e-9 + 1e-6 * r["seconds"], r
    else:  # no bound: what it loses is unknown
        assert r["lost_s"] is None, r
# tiny-gpt2: 4 layers, hidden 128, 4 heads of 32; 2 x 32 tokens: q, k, v GEMMs 2 N C (3 C) each layer
assert rows["qkv fwd"]["flops"] == 4 * 2 * 64 * 128 * 384, rows["qkv fwd"]["flops"]
PY
done
# an MoE model changed by model.KEY=VALUE: the banner names the changes, the MoE kernels have
# rows of their own (router GEMMs, the experts' grouped GEMMs, routing, permuting, combining)
if "$LOOM" bench model --model tiny-qwen3-moe model.layers=2 model.moe.experts=6 --batch 2 --seq 32 \
  --steps 1 --warmup 1 --no-gemm --roofline --json "$WORK/moe.json" >"$WORK/moe.txt" 2>&1; then
  check "moe: the banner names the overrides" \
    grep -q "tiny-qwen3-moe model.layers=2 model.moe.experts=6 B=2" "$WORK/moe.txt"
  check "moe: JSON rows of the MoE kernels" /usr/bin/python3 - "$WORK/moe.json" <<'PY'
import json, sys
rows = {r["part"]: r for r in json.load(open(sys.argv[1]))["roofline"]}
need = ["router fwd", "router dgrad", "router wgrad", "experts fwd", "experts bwd", "moe route",
        "moe permute", "moe combine"]
missing = [p for p in need if p not in rows]
assert not missing, f"missing parts {missing}"
# 2 layers, 2 x 32 tokens, hidden 128, 6 experts: the router forward 2 N C E each layer; the
# experts' forward gate, up and down over the N k = 128 rows, 2 rows C Ie each (Ie 96)
assert rows["router fwd"]["flops"] == 2 * 2 * 64 * 128 * 6, rows["router fwd"]["flops"]
assert rows["experts fwd"]["flops"] == 2 * 6 * 128 * 128 * 96, rows["experts fwd"]["flops"]
assert "fc1 fwd" not in rows, "no dense MLP in an MoE model without a shared expert"
PY
else
  fail "bench model on an MoE model with overrides"; tail -5 "$WORK/moe.txt" >&2
fi
out=$("$LOOM" bench model --model tiny-gpt2 training.lr=1 --no-gemm 2>&1); rc=$?
check "a non-model key exits 2" [ "$rc" = 2 ]
check "a non-model key is named" grep -q "unexpected argument 'training.lr=1'" <<<"$out"
out=$("$LOOM" bench model --model tiny-gpt2 model.hiden=64 --no-gemm 2>&1); rc=$?
check "a misspelt model key exits 2 with a suggestion" \
  bash -c '[ "$1" = 2 ] && grep -q "model.hidden" <<<"$2"' _ "$rc" "$out"
out=$(LOOM_GEMM_PACK=yes "$LOOM" bench model --model tiny-gpt2 --batch 2 --seq 32 --steps 1 \
  --dtype bf16 --no-gemm 2>&1); rc=$?
check "LOOM_GEMM_PACK=yes exits 2" [ "$rc" = 2 ]
check "LOOM_GEMM_PACK=yes is named with what to use" grep -q "LOOM_GEMM_PACK=yes is not 0 or 1" <<<"$out"
out=$(LOOM_GEMM_RAGGED=yes "$LOOM" bench model --model tiny-gpt2 --batch 2 --seq 32 --steps 1 \
  --no-gemm 2>&1); rc=$?
check "LOOM_GEMM_RAGGED=yes exits 2 (a dense model too)" [ "$rc" = 2 ]
check "LOOM_GEMM_RAGGED=yes is named with what to use" grep -q "LOOM_GEMM_RAGGED=yes is not 0 or 1" <<<"$out"
out=$(LOOM_SIMD=avx3 "$LOOM" bench model --model tiny-gpt2 --batch 2 --seq 32 --steps 1 \
  --no-gemm 2>&1); rc=$?
check "LOOM_SIMD=avx3 exits 2" [ "$rc" = 2 ]
check "LOOM_SIMD=avx3 is named with the paths to use" \
  grep -q "LOOM_SIMD=avx3 is not a code path: use generic (portable C), avx2" <<<"$out"
out=$(LOOM_SIMD=avx2 "$LOOM" bench model --model tiny-gpt2 --batch 2 --seq 32 --steps 1 \
  --no-gemm 2>&1); rc=$?
check "LOOM_SIMD=avx2 runs" [ "$rc" = 0 ]
if grep -qw avx2 /proc/cpuinfo; then
  check "LOOM_SIMD=avx2 runs the AVX2 kernels" grep -q "kernels avx2" <<<"$out"
fi
out=$("$LOOM" bench model --rooflin 2>&1); rc=$?
check "misspelt option exits 2" [ "$rc" = 2 ]
check "misspelt option suggests --roofline" grep -q "roofline" <<<"$out"
finish
