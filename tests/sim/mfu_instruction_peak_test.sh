#!/usr/bin/env bash
# MFU against the instruction peak, end to end: `loom bench --only peak` writes
# device.instruction_peak into a profile; `loom train` on that profile (LOOM_HW_PROFILE) names
# the peak in train.log (the unit's instruction, the threads; the library's GEMM beside it
# where the profile measured one), takes the profile's figure for the run's dtype at its
# threads (summary.json's peak_flops, bitwise) and says so in peak_source (peak "instruction",
# the unit, the library's figure where there is one); its MFU is within (0, 1] or absent with
# a note. The same profile without the key keeps the library's figure, named as such. Nothing timed is asserted: the rates are whatever this
# machine measured, the checks are where each number comes from.
# usage: mfu_instruction_peak_test.sh LOOM
. "$(dirname "$0")/../train/common.sh"
make_data || { echo "could not make test data"; exit 1; }
P=$WORK/peak.yaml
if ! "$LOOM" bench --quick --quiet --only peak --out "$P" >"$WORK/bench.out" 2>&1; then
  fail "loom bench --only peak: $(tail -3 "$WORK/bench.out")"; finish; exit
fi
if ! grep -q "instruction_peak:" "$P"; then # no FMA unit (not x86-64 with AVX2 + FMA)
  echo "skipped: this CPU has no instruction peak ($(grep -o 'no instruction peak.*' "$WORK/bench.out"))"
  finish; exit
fi
run() { # name, extra overrides... -> run directory
  local name=$1; shift
  "$LOOM" train run.output_dir="$WORK/runs" run.name="$name" model.preset=tiny-gpt2 \
    model.vocab_size=300 model.max_seq=64 training.seq_len=32 training.micro_batch_size=4 \
    training.steps=4 training.log_every=2 data.train_shards="$WORK/train.bin" "$@" \
    --quiet >/dev/null 2>"$WORK/$name.err" ||
    { fail "$name: training failed: $(tail -2 "$WORK/$name.err")"; return; }
  ls -d "$WORK/runs/${name}_"*
}
# the profile's figure for a dtype at a thread count, as loom reads it: GFLOP/s x 1e9
figure() { /usr/bin/python3 - "$P" "$1" "$2" <<'PY'
import sys, yaml
ip = yaml.safe_load(open(sys.argv[1]))["device"]["instruction_peak"]
print(repr(float(ip[sys.argv[2] + "_gflops"][ip["threads"].index(int(sys.argv[3]))]) * 1e9))
PY
}
UNIT=$(/usr/bin/python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["device"]["instruction_peak"]["bf16_unit"])' "$P")
declare -A INSTR=([fma]="FMA vfmadd231ps" [avx512_bf16]="AVX512_BF16 vdpbf16ps" [amx]="AMX tdpbf16ps")
cores=$(getconf _NPROCESSORS_ONLN)

for dt in fp32 bf16; do
  unit=$([ $dt = fp32 ] && echo fma || echo "$UNIT")
  for threads in 1 2; do
    used=$(( threads < cores ? threads : cores ))
    d=$(OMP_NUM_THREADS=$threads LOOM_HW_PROFILE="$P" run "$dt-$threads" training.dtype=$dt)
    [ -n "$d" ] || continue
    want=$(figure $dt $used)
    check "$dt, $threads threads: train.log names the $unit instruction peak of $used thread(s)" \
      grep -q "MFU against [0-9.]* GFLOP/s per rank (${INSTR[$unit]} instruction peak, $used thread[s]*, of hardware profile" "$d/train.log"
    check "$dt, $threads threads: train.log says the profile has no library figure beside it" \
      grep -q "no library GEMM figure in the profile (loom bench's gemm section measures one)" "$d/train.log"
    check "$dt, $threads threads: summary.json's peak is the profile's figure, said to be the instruction peak" \
      /usr/bin/python3 - "$d/summary.json" "$want" "$unit" "$used" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); src = s["peak_source"]
ok = (repr(float(s["peak_flops"])) == sys.argv[2] and src["peak"] == "instruction" and
      src["unit"] == sys.argv[3] and src["peak_threads"] == int(sys.argv[4]) and
      "library_peak_flops" not in src)  # loom bench --only peak: no library figure measured
m = s.get("mfu")
ok = ok and ((m is not None and 0 < m <= 1) or (m is None and "instruction peak" in s["mfu_note"]))
if not ok: print(s["peak_flops"], sys.argv[2], src, m, s.get("mfu_note"))
sys.exit(not ok)
PY
  done
done

# loom sim on the same profile takes MFU against the same peak: its devices are cores, one
# thread each, so 2 devices count the profile's 2-thread figure (not twice the 1-thread one:
# shared cores and AMX units scale less than that); the JSON names it and MFU is tokens/s x
# FLOPs per token over that figure (1e-8 relative: the JSON prints tokens/s to 9 significant
# digits), or absent, said so, where that ratio is above 1 (this profile prices the GEMMs at
# loom bench's default rates, which may be above a slow machine's instruction peak)
for dt in fp32 bf16; do
  used=$(( 2 < cores ? 2 : cores ))
  if ! "$LOOM" sim model.preset=tiny-gpt2 model.vocab_size=300 model.max_seq=64 training.seq_len=32 \
      training.micro_batch_size=4 parallel.dp=$used --dtype $dt --hardware "$P" --gpus $used \
      --json "$WORK/sim-$dt.json" >"$WORK/sim-$dt.out" 2>&1; then
    fail "loom sim $dt: $(tail -2 "$WORK/sim-$dt.out")"; continue
  fi
  unit=$([ $dt = fp32 ] && echo fma || echo "$UNIT")
  check "loom sim $dt: the JSON's MFU is against the profile's $used-thread $dt ${INSTR[$unit]} figure" \
    /usr/bin/python3 - "$WORK/sim-$dt.json" "$(figure $dt $used)" "${INSTR[$unit]}" "$WORK/sim-$dt.out" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); text = open(sys.argv[4]).read()
want = s["tokens_per_s"] * s["flops_per_token"] / float(sys.argv[2])
if want <= 1:
    ok = (s["mfu_peak"] == sys.argv[3] + " instruction peak" and abs(s["mfu"] - want) <= 1e-8 * want
          and "(against the %s instruction peak;" % sys.argv[3] in text)
else:
    ok = s["mfu"] is None and ("%.1f%% is above the profile's peak" % (100 * want)) in s["mfu_note"]
if not ok: print(s.get("mfu"), want, s.get("mfu_peak"), s.get("mfu_note"))
sys.exit(not ok)
PY
done

# the profile as if its gemm section had run (it names the backend): the library's figure
# beside the instruction peak, in train.log and summary.json
sed 's/^  engine: loom-cpu$/  engine: loom-cpu\n  gemm_backend: onednn/' "$P" >"$WORK/lib.yaml"
check "fixture: profile naming its GEMM backend" grep -q "^  gemm_backend: onednn" "$WORK/lib.yaml"
d=$(OMP_NUM_THREADS=1 LOOM_HW_PROFILE="$WORK/lib.yaml" run lib)
if [ -n "$d" ]; then
  check "library figure: train.log sets the gemm section's GEMM beside the instruction peak" \
    grep -q "(FMA vfmadd231ps instruction peak, 1 thread, .*); the gemm section's best fp32 GEMM (onednn backend): 1 x [0-9.]* = [0-9.]* GFLOP/s, [0-9.]*% of it" "$d/train.log"
  check "library figure: summary.json's library_peak_flops is the profile's one-core fp32 peak" \
    /usr/bin/python3 - "$d/summary.json" "$WORK/lib.yaml" <<'PY'
import json, sys, yaml
src = json.load(open(sys.argv[1]))["peak_source"]
want = float(yaml.safe_load(open(sys.argv[2]))["device"]["peak_tflops"]["fp32"]) * 1e12
sys.exit(not (src["peak"] == "instruction" and src["library_peak_flops"] == want))
PY
fi

# the same profile without the key: the library's figure (loom bench's defaults here), said so
/usr/bin/python3 - "$P" "$WORK/old.yaml" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
out, skip = [], False
for l in lines:
    if l.startswith("  instruction_peak:"): skip = True; continue
    if skip and l.startswith("    "): continue
    skip = False; out.append(l)
open(sys.argv[2], "w").write("\n".join(out))
PY
check "fixture: profile without instruction_peak" bash -c '! grep -q instruction_peak "$1"' _ "$WORK/old.yaml"
d=$(OMP_NUM_THREADS=1 LOOM_HW_PROFILE="$WORK/old.yaml" run old)
if [ -n "$d" ]; then
  check "no instruction peak: train.log says the peak is the library's GEMM figure" \
    grep -q "the fp32 matrix peak of one core in hardware profile .*: the gemm section's best GEMM, not an instruction peak" "$d/train.log"
  check "no instruction peak: summary.json's peak_source says library" /usr/bin/python3 -c \
    'import json, sys; s = json.load(open(sys.argv[1]))["peak_source"]; sys.exit(not (s["peak"] == "library" and "unit" not in s))' "$d/summary.json"
fi
finish
