#!/usr/bin/env bash
# The precision policy end to end (training.param_dtype / optim_dtype = bf16, with bf16
# matmuls): every parallel layout trains the same run as one process, the checkpoints store
# the real dtypes and resume bitwise, the saved gradients are bf16 values, the memory lines of
# train.log shrink, the Hugging Face export is BF16, refused combinations are clear errors, and
# training.reduce_dtype=bf16 reduces in bf16 (bf16 sums, half the bytes) within tolerance.
#
# Tolerances (one process vs a layout): losses 2e-3 relative per step, as for bf16 compute in
# tests/train/parallel_equivalence_test.sh: a layout reorders fp32 sums (~1e-7), a reordering can flip
# a bf16 rounding of a matmul input (2^-8 relative) and the flip propagates. Final weights
# 1e-2 (loom ckpt compare: max|a-b| <= 1e-2 * the model's largest |w|): with bf16 storage a
# flip moves a stored parameter by one bf16 ulp, at most 2^-8 = 3.9e-3 of the largest weight;
# 1e-2 allows two or three such ulps on one element. Measured (4 steps): dp2 ZeRO-1/2 and pp2
# bitwise equal to one process, ZeRO-3 and tp2 one ulp (max|a-b| 2.3e-4..4.6e-4 of the
# largest weight), losses <= 5e-6.
. "$(dirname "$0")/../train/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }

LLAMA=(model.preset=tiny-llama model.vocab_size=301 model.vocab_pad_multiple=1 model.layers=2
  model.hidden=64 model.heads=4 model.kv_heads=2 model.intermediate=96 training.seq_len=32
  training.steps=4 training.warmup_steps=2 data.train_shards="$WORK/train.bin"
  training.dtype=bf16 training.param_dtype=bf16 training.log_every=1)
TOL=2e-3 WTOL=1e-2

quiet() { "$@" >/dev/null 2>&1; }
# dtypes_of FILE: the distinct tensor dtypes of a safetensors file (loom ckpt inspect)
dtypes_of() { "$LOOM" ckpt inspect "$1" 2>/dev/null | awk '$2 ~ /^(F32|BF16)$/ {print $2}' | sort -u | tr '\n' ' '; }

for opt in fp32 bf16; do
  echo "param_dtype=bf16, optim_dtype=$opt: layouts against one process"
  P=("${LLAMA[@]}" training.optim_dtype=$opt checkpoint.save_gradients=true)
  train s_$opt 1 "${P[@]}" training.micro_batch_size=4 training.grad_accum=2
  check_case() { # name np overrides...
    local name=$1 np=$2; shift 2
    train "$name" "$np" "$@" && { close_losses "s_$opt" "$name" "$TOL"; close_weights "s_$opt" "$name" "$WTOL"; }
  }
  check_case dp2_zero1_$opt 2 "${P[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.zero=1
  check_case dp2_zero2_$opt 2 "${P[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.zero=2
  check_case dp2_zero3_$opt 2 "${P[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.zero=3
  check_case tp2_$opt 2 "${P[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.tp=2
  check_case pp2_$opt 2 "${P[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.pp=2
  # the files hold the real dtypes: parameters and gradients BF16, moments in optim_dtype
  want=$([ $opt = bf16 ] && echo BF16 || echo F32)
  for name in s_$opt dp2_zero1_$opt; do
    ck=$(run_dir $name)/final_checkpoint
    m=$(ls "$ck"/model*.safetensors | head -1) o=$(ls "$ck"/optimizer*.safetensors | head -1)
    g=$(ls "$ck"/gradients*.safetensors | head -1)
    check "$name: parameters stored as BF16 ($(dtypes_of "$m"))" test "$(dtypes_of "$m")" = "BF16 "
    check "$name: gradients stored as BF16 ($(dtypes_of "$g"))" test "$(dtypes_of "$g")" = "BF16 "
    check "$name: moments stored as $want ($(dtypes_of "$o"))" test "$(dtypes_of "$o")" = "$want "
  done
done

echo "resume: N steps straight == N/2, stop, resume, N/2 (bitwise losses and weights)"
resume_case() { # name np overrides...
  local name=$1 np=$2; shift 2
  train ${name}_straight "$np" "$@" checkpoint.every=2 || return
  train ${name}_cut "$np" "$@" checkpoint.every=2 --stop-after 2 || return
  local a b
  a=$(run_dir ${name}_straight) b=$(run_dir ${name}_cut)
  if [ "$np" = 1 ]; then "$LOOM" train --resume "$b/checkpoint_2" --quiet >"$WORK/$name.resume.log" 2>&1
  else timeout 300 "${MPIRUN[@]}" -np "$np" "$LOOM" train --resume "$b/checkpoint_2" --quiet \
         >"$WORK/$name.resume.log" 2>&1; fi || { fail "$name: resume failed"; tail -3 "$WORK/$name.resume.log" >&2; return; }
  check "$name: resumed run has 4 steps" test "$(losses "$b" | wc -l)" = 4
  if [ "$(losses "$a")" = "$(losses "$b")" ]; then pass; else
    fail "$name: losses differ after resume"; diff <(losses "$a") <(losses "$b") >&2; fi
  check "$name: final weights identical (rtol 0)" quiet "$LOOM" ckpt compare "$a/final_checkpoint" \
    "$b/final_checkpoint" --rtol 0
  for f in "$a"/final_checkpoint/*.safetensors; do
    check "$name: $(basename "$f") bitwise identical" cmp -s "$f" "$b/final_checkpoint/$(basename "$f")"
  done
}
resume_case r_single 1 "${LLAMA[@]}" training.optim_dtype=bf16 training.micro_batch_size=4 training.grad_accum=2
resume_case r_dp2_zero1 2 "${LLAMA[@]}" training.optim_dtype=bf16 training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.zero=1

echo "memory: the train.log lines (allocated bytes per rank) shrink with bf16 storage"
BIG=(model.preset=tiny-llama model.vocab_size=301 model.layers=4 model.hidden=256 model.heads=4
  model.kv_heads=2 model.intermediate=512 training.seq_len=16 training.micro_batch_size=1
  training.steps=1 data.train_shards="$WORK/train.bin" training.dtype=bf16)
# mem NAME: "params grads optimizer" (MiB) of rank 0
mem() { grep -A1 'memory per rank' "$(run_dir "$1")/train.log" | tail -1 | awk '{print $4, $5, $6}'; }
train m_mixed 1 "${BIG[@]}"
train m_param 1 "${BIG[@]}" training.param_dtype=bf16
train m_both 1 "${BIG[@]}" training.param_dtype=bf16 training.optim_dtype=bf16
LOOM_GEMM=openblas train m_mixed_blas 1 "${BIG[@]}"
LOOM_GEMM=openblas train m_param_blas 1 "${BIG[@]}" training.param_dtype=bf16
read -r p0 g0 o0 <<<"$(mem m_mixed)"; read -r p1 g1 o1 <<<"$(mem m_param)"; read -r p2 g2 o2 <<<"$(mem m_both)"
read -r pb0 gb0 _ <<<"$(mem m_mixed_blas)"; read -r pb1 gb1 _ <<<"$(mem m_param_blas)"
echo "  MiB params/grads/optimizer: mixed (dtype bf16) $p0/$g0/$o0, param_dtype=bf16 $p1/$g1/$o1, + optim_dtype=bf16 $p2/$g2/$o2"
echo "  OpenBLAS: mixed $pb0/$gb0, param_dtype=bf16 $pb1/$gb1"
# ratio A B: A / B (the grads line is 4 bytes per parameter)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
near() { awk -v r="$1" -v t="$2" 'BEGIN { exit !(r > t - 0.02 && r < t + 0.02) }'; }
# mixed precision: the fp32 weights, plus what the matmuls read: 2-byte weights for native bf16
# GEMMs (oneDNN: 6 bytes per parameter; no rounded fp32 copy, which nothing reads there) or
# the rounded fp32 copy (OpenBLAS: 8 bytes); bf16 parameters: no rounded copy on either
r0=$(ratio "$p0" "$g0") rb0=$(ratio "$pb0" "$gb0") rb1=$(ratio "$pb1" "$gb1")
native_or_rounded() { near "$1" 1.5 || near "$1" 2.0; }
check "mixed bf16 holds 6 (native bf16 GEMMs) or 8 bytes a parameter: $r0 x 4" native_or_rounded "$r0"
check "OpenBLAS: mixed bf16 reads the rounded copy, 8 bytes a parameter: $rb0 x 4" near "$rb0" 2.0
check "OpenBLAS: param_dtype=bf16 drops the rounded copy, 4 bytes a parameter: $rb1 x 4" near "$rb1" 1.0
check "param_dtype=bf16 holds no more than mixed: params $p1 <= $p0 MiB" awk -v a="$p1" -v b="$p0" 'BEGIN { exit !(a <= b + 0.05) }'
check "optim_dtype=bf16 halves the moments: $o2 = $o1 / 2 MiB" awk -v a="$o2" -v b="$o1" 'BEGIN { r = b / a; exit !(r > 1.97 && r < 2.03) }'
check "grads unchanged ($g0 $g1 $g2)" test "$g0" = "$g1" -a "$g1" = "$g2"

echo "Hugging Face export of bf16 parameters: BF16 tensors, exact (import gives the same weights)"
ck=$(run_dir s_bf16)/final_checkpoint
"$LOOM" ckpt export "$ck" --out "$WORK/hf" >/dev/null 2>"$WORK/export.err" || fail "export: $(cat "$WORK/export.err")"
check "export: tensors are BF16 ($(dtypes_of "$WORK/hf/model.safetensors"))" test "$(dtypes_of "$WORK/hf/model.safetensors")" = "BF16 "
check "export: config.json torch_dtype bfloat16" grep -q '"torch_dtype": "bfloat16"' "$WORK/hf/config.json"
"$LOOM" ckpt import "$WORK/hf" --out "$WORK/hf_back" >/dev/null 2>"$WORK/import.err" || fail "import: $(cat "$WORK/import.err")"
check "export -> import gives the checkpoint's weights bit for bit" quiet "$LOOM" ckpt compare "$ck" "$WORK/hf_back" --rtol 0
"$LOOM" ckpt export "$ck" --out "$WORK/hf32" --dtype f32 >/dev/null 2>&1
check "export --dtype f32 still writes F32" test "$(dtypes_of "$WORK/hf32/model.safetensors")" = "F32 "

echo "refused combinations: clear errors, exit 1, no run directory"
refused() { # what expected-text overrides...
  local what=$1 want=$2; shift 2
  local out rc
  out=$("$LOOM" train "${LLAMA[@]}" run.output_dir="$WORK/refused" "$@" 2>&1); rc=$?
  check "$what: exit 1 (got $rc)" test "$rc" = 1
  check "$what: message names the keys" grep -qF "$want" <<<"$out"
  check "$what: no run directory" test ! -e "$WORK/refused"
}
refused "bf16 parameters, fp32 matmuls" "training.param_dtype = bf16 needs training.dtype = bf16" training.dtype=fp32
refused "bf16 vision parameters, fp32 matmuls" "vision.param_dtype = bf16 needs training.dtype = bf16" training.dtype=fp32 training.param_dtype=fp32 vision.param_dtype=bf16
refused "fp16 moments" "training.optim_dtype must be one of fp32, bf16" training.optim_dtype=fp16

echo "vision-language model: vision.param_dtype / optim_dtype apart from the text module's"
{ "$LOOM" data synth-vqa --out "$WORK/vqa" --samples 104 --shard-size 8 &&
  "$LOOM" data prepare "$WORK/vqa" --split 12,1,0; } >"$WORK/synth.log" 2>&1 ||
  fail "could not make the VQA data: $(tail -2 "$WORK/synth.log")"
VLM=(model.preset=tiny-qwen2.5-vl model.vocab_size=384 training.seq_len=48 training.steps=4
  training.warmup_steps=1 data.format=vqa data.vqa_path="$WORK/vqa"
  data.tokenizer="$WORK/vqa/tokenizer.json" data.image_min_pixels=12544
  data.image_max_pixels=12544 training.dtype=bf16 training.log_every=1 checkpoint.every=2)
# vdtypes RUN MODULE-PREFIX KIND: dtypes of the final checkpoint's file of that module and kind
vdtypes() { dtypes_of "$(run_dir "$1")/final_checkpoint/$2$3-r00000.safetensors"; }
train v_text 1 "${VLM[@]}" training.param_dtype=bf16 training.optim_dtype=bf16 \
  vision.param_dtype=fp32 vision.optim_dtype=fp32
check "text bf16 / vision fp32: text parameters BF16 ($(vdtypes v_text "" model))" test "$(vdtypes v_text "" model)" = "BF16 "
check "text bf16 / vision fp32: text moments BF16" test "$(vdtypes v_text "" optimizer)" = "BF16 "
check "text bf16 / vision fp32: vision parameters F32 ($(vdtypes v_text vision- model))" test "$(vdtypes v_text vision- model)" = "F32 "
check "text bf16 / vision fp32: vision moments F32" test "$(vdtypes v_text vision- optimizer)" = "F32 "
V2=("${VLM[@]}" vision.param_dtype=bf16 vision.optim_dtype=bf16)
train v_vision 1 "${V2[@]}"
check "text fp32 / vision bf16: text parameters F32 ($(vdtypes v_vision "" model))" test "$(vdtypes v_vision "" model)" = "F32 "
check "text fp32 / vision bf16: vision parameters BF16" test "$(vdtypes v_vision vision- model)" = "BF16 "
check "text fp32 / vision bf16: vision moments BF16" test "$(vdtypes v_vision vision- optimizer)" = "BF16 "
"$LOOM" ckpt export "$(run_dir v_vision)/final_checkpoint" --out "$WORK/hf_vlm" >/dev/null 2>&1
check "VLM export with fp32 text parameters defaults to F32" test "$(dtypes_of "$WORK/hf_vlm/model.safetensors")" = "F32 "
train v_cut 1 "${V2[@]}" --stop-after 2
"$LOOM" train --resume "$(run_dir v_cut)/checkpoint_2" --quiet >"$WORK/v_cut.resume.log" 2>&1 ||
  fail "VLM resume: $(tail -2 "$WORK/v_cut.resume.log")"
check "VLM (bf16 vision storage) resumes bitwise: losses" test "$(losses "$(run_dir v_vision)")" = "$(losses "$(run_dir v_cut)")"
check "VLM resumes bitwise: weights" quiet "$LOOM" ckpt compare "$(run_dir v_vision)/final_checkpoint" \
  "$(run_dir v_cut)/final_checkpoint" --rtol 0
# the VLM's modules in parallel layouts (the encoder's own synchroniser, bf16 storage and bf16
# reductions) against one process, same tolerances as the text model
V3=("${VLM[@]}" training.param_dtype=bf16 training.optim_dtype=bf16 checkpoint.every=0)
train v3_single 1 "${V3[@]}" training.micro_batch_size=4 training.grad_accum=2
for c in "v3_dp2_zero1 parallel.dp=2 parallel.zero=1 training.reduce_dtype=bf16" \
         "v3_dp2_zero3 parallel.dp=2 parallel.zero=3" \
         "v3_tp2 parallel.tp=2 vision.parallel.tp=2"; do
  set -- $c; name=$1; shift
  mb=$([ "${1#parallel.dp=2}" != "$1" ] && echo "training.micro_batch_size=2" || echo "training.micro_batch_size=4")
  train $name 2 "${V3[@]}" $mb training.grad_accum=2 "$@" &&
    { close_losses v3_single $name "$TOL"; close_weights v3_single $name "$WTOL"; }
done

echo "reduce_dtype=bf16: data-parallel reductions in bf16, against one process"
# One more bf16 rounding per reduced gradient element (each rank's sum, then the pair's sum):
# a relative change of <= 2^-8 of a gradient element, which AdamW turns into an update change
# of the same relative size, far below a stored parameter's ulp; same tolerances as above.
# Measured: max|a-b| <= 3.1e-4 of the largest weight (0.031 of the allowed), losses <= 7.8e-6.
R=("${LLAMA[@]}" training.param_dtype=fp32 checkpoint.save_gradients=true)
train rs_single 1 "${R[@]}" training.micro_batch_size=4 training.grad_accum=2
for z in 0 1 2 3; do
  train rs_z$z 2 "${R[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2     parallel.zero=$z training.reduce_dtype=bf16 &&
    { close_losses rs_single rs_z$z "$TOL"; close_weights rs_single rs_z$z "$WTOL"; }
done
train rs_pbf16 2 "${LLAMA[@]}" training.optim_dtype=bf16 training.micro_batch_size=2   training.grad_accum=2 parallel.dp=2 parallel.zero=1 training.reduce_dtype=bf16 &&
  { close_losses s_bf16 rs_pbf16 "$TOL"; close_weights s_bf16 rs_pbf16 "$WTOL"; }
# the reduced gradient is a bf16 sum even with fp32 parameters (ZeRO-0: the bucket all-reduce,
# ZeRO-1: the reduce-scatter; the saved file is F32, its values bf16)
for z in 0 1; do
  g=$(ls "$(run_dir rs_z$z)"/final_checkpoint/gradients*.safetensors | head -1)
  nb=$(LOOM_TORCH_DIR="$(cd "$(dirname "$0")/../torch" && pwd)" /usr/bin/python3 -c '
import os, sys, numpy as np
sys.path.insert(0, os.environ["LOOM_TORCH_DIR"])
import st_io
t, _ = st_io.read(sys.argv[1])
print(sum(int(np.count_nonzero(np.asarray(v, np.float32).view(np.uint32) & 0xFFFF)) for v in t.values()))' "$g")
  check "rs_z$z: reduced gradients are bf16 values ($nb are not)" test "$nb" = 0
done
# half the bytes on the wire: comm.json of the same layout with fp32 and bf16 reductions
train rs_z0_fp32 2 "${R[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2
train rs_z1_fp32 2 "${R[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.zero=1
bytes() { /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["bytes_per_step"][0][sys.argv[2]])' "$(run_dir "$1")/comm.json" "$2"; }
for pair in "rs_z0 all-reduce" "rs_z1 reduce-scatter"; do
  set -- $pair
  a=$(bytes $1_fp32 $2) b=$(bytes $1 $2)
  check "$1: $2 bytes per step halve with bf16 reductions ($a -> $b)" \
    /usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(not (a > 0 and a == 2 * b))' "$a" "$b"
done
finish
