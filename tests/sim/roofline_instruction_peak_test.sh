#!/usr/bin/env bash
# `loom bench model --roofline` holds the compute parts to the instruction peak of the step's
# dtype where this machine's profile has one (LOOM_HW_PROFILE: a profile `loom bench --only
# peak` wrote), names it, and prints the library's best GEMM measured here beside it; the
# JSON says which bound the fractions are of (roofline_bound, roofline_bound_gflops) and every
# compute row's fraction is its rate over that bound. Without the key the bound is the
# library's GEMM peak measured here, said so. Nothing timed is asserted: the checks are which
# figure each fraction is taken against.
# usage: roofline_instruction_peak_test.sh LOOM
. "$(dirname "$0")/../assert.sh"
LOOM=$1
WORK=$(mktemp -d /tmp/loom-roofline-peak.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
P=$WORK/peak.yaml
if ! "$LOOM" bench --quick --quiet --only peak --out "$P" >"$WORK/bench.out" 2>&1; then
  fail "loom bench --only peak: $(tail -3 "$WORK/bench.out")"; finish; exit
fi
if ! grep -q "instruction_peak:" "$P"; then
  echo "skipped: this CPU has no instruction peak"; finish; exit
fi
grep -v -e "^  instruction_peak:" -e "^    threads:" -e "^    fp32_gflops:" -e "^    bf16_gflops:" \
  -e "^    bf16_unit:" "$P" >"$WORK/old.yaml"
cores=$(getconf _NPROCESSORS_ONLN)
used=$(( 2 < cores ? 2 : cores ))
model() { # profile, name -> the run's stdout in $WORK/name.txt, JSON in $WORK/name.json
  OMP_NUM_THREADS=2 LOOM_HW_PROFILE="$1" "$LOOM" bench model --model tiny-gpt2 --batch 2 \
    --seq 32 --steps 1 --warmup 1 --roofline --json "$WORK/$2.json" --out "$WORK/$2-step.yaml" \
    >"$WORK/$2.txt" 2>&1 || { fail "bench model --roofline ($2): $(tail -3 "$WORK/$2.txt")"; return 1; }
}

if model "$P" ip; then
  check "instruction peak: the compute bound is named, the library's GEMM beside it" \
    grep -q "^compute bound: the fp32 FMA vfmadd231ps instruction peak ($used thread[s]*, .*), [0-9.]* GFLOP/s; the library's best fp32 GEMM measured here with 2 threads: [0-9.]* GFLOP/s = [0-9.]*% of it" "$WORK/ip.txt"
  check "instruction peak: the table's bounds line names it" \
    grep -q "bounds: fp32 FMA vfmadd231ps instruction peak" "$WORK/ip.txt"
  check "instruction peak: MFU against it beside the library's" \
    grep -q "(library); MFU [0-9.]*% of the fp32 FMA vfmadd231ps instruction peak" "$WORK/ip.txt"
  check "instruction peak: JSON bound = the profile's fp32 figure of $used threads; fractions of it" \
    /usr/bin/python3 - "$WORK/ip.json" "$P" "$used" <<'PY'
import json, sys, yaml
j = json.load(open(sys.argv[1]))
ip = yaml.safe_load(open(sys.argv[2]))["device"]["instruction_peak"]
want = float(ip["fp32_gflops"][ip["threads"].index(int(sys.argv[3]))])
bound = j["roofline_bound_gflops"]
assert j["roofline_bound"] == "instruction", j["roofline_bound"]
assert abs(bound - want) <= 1e-3 + 1e-6 * want, (bound, want)
assert abs(j["instruction_peak_gflops"] - want) <= 1e-3 + 1e-6 * want
assert j["gemm_peak_gflops"] > 0 and j["mfu_instruction"] is not None
compute = [r for r in j["roofline"] if "flops" in r and r["flops"] > 0 and r["seconds"] > 0]
assert compute, "no compute rows"
for r in compute:
    rate = r["flops"] / r["seconds"] / 1e9
    if r["fraction"] is None:  # above the bound: a note, no fraction
        assert rate > bound * (1 - 1e-4) and "peak" in r["note"], r
    else:
        assert abs(r["fraction"] - rate / bound) <= 1e-4 * (rate / bound) + 1e-6, (r, rate / bound)
PY
fi

if model "$WORK/old.yaml" lib; then
  check "no instruction peak: the bound is the library's GEMM measured here, said so" \
    grep -q "^compute bound: the library's best fp32 GEMM measured here; the profile of this machine (.*) has no instruction peak: 'loom bench --only peak' measures it" "$WORK/lib.txt"
  check "no instruction peak: the table's bounds line names the library's peak" \
    grep -q "bounds: fp32 library GEMM peak (best measured here)" "$WORK/lib.txt"
  check "no instruction peak: JSON bound = the GEMM peak measured here" /usr/bin/python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
sys.exit(not (j["roofline_bound"] == "library" and j["roofline_bound_gflops"] == j["gemm_peak_gflops"]
              and j["instruction_peak_gflops"] is None and j["mfu_instruction"] is None))' "$WORK/lib.json"
fi
finish
