#!/usr/bin/env bash
# Expert parallelism (parallel.ep) through `loom train`: the routed experts of every MoE layer
# are spread over ep consecutive data-parallel ranks, the permuted token rows exchanged with
# uneven all-to-alls (src/model/decoder_moe.c). Every layout equals one process on the same
# micro-batches (tiny-qwen3-moe, 4 experts, 3 layers with the middle one dense, aux + z-loss,
# balancing bias, fp32, 20 steps, one sequence per micro-batch: per-step loss within 1e-5
# relative, final weights within 1e-4, as tests/model/moe_train_test.sh checks dp):
#  - ep=2 (dp=2), ep=2 with dp=4 (two expert groups; also ZeRO-1 and 3, the experts' moments
#    sharded over the groups), ep=4 (dp=4), ep=2 with ZeRO 1, 2, 3;
#  - capacity dropping (by position) with ep=2 equals one process with the same capacity;
#  - validation with ep=2 equals dp=2; activation checkpointing with ep=2 is bitwise the same;
#  - bf16 with ep=2 against bf16 dp=2 (the same micro-batches) within the bf16 tolerance
#    (2e-3, tests/train/parallel_equivalence_test.sh's);
#  - a checkpoint written with ep=2 loads in one process with its parameters exactly (ckpt
#    compare --rtol 0 against what one process loaded), resumes there the same bit for bit
#    twice and continues like the ep=2 run (losses 1e-5, final weights 1e-4);
#  - each rank holds only its experts: the checkpoint files of ep=2 x dp=4 and ep=2 ZeRO-3
#    hold every tensor exactly once (dense on dp rank 0 or sharded, experts 0-1 on rank 0,
#    2-3 on rank 1, nothing of them on ranks 2-3), and the ep=4 ranks' parameters are smaller
#    than dp=4's (the memory table);
#  - reshard: the ep=2 checkpoint resumes under ep=4 x dp=4, ep=2 ZeRO-2, ep=2 x dp=4 ZeRO-1,
#    tp=2 (experts split) and tp=2 with the experts folded like the ep=2 run continues (losses
#    1e-5, final weights 1e-4);
#  - kill -9 of the rank writing only experts during a checkpoint save: no checkpoint_<N> is
#    left incomplete, and `--resume latest` finishes with the uninterrupted run's losses bit for
#    bit and byte-identical final weights;
#  - tensor parallelism: the experts' inner dimension split over tp (router replicated):
#    tp=2, tp=2 with a shared expert, ep=2 x tp=2 x dp=2 (also ZeRO-1) equal one process, and
#    their gradient norms too (every expert counted once: Megatron PR #5916); bf16 tp=2;
#    experts folded whole on the tp ranks (etp=1, ep=tp=2; also x dp=2 ZeRO-1) likewise;
#  - tokens split over Ulysses sp or context parallelism (the aux and z terms pooled over the
#    split, the experts' gradients reduced over it): sp=2, cp=2, ep=2 x sp=2 x dp=2,
#    ep=2 x cp=2 x dp=2 ZeRO-1 equal one process;
#  - pipeline parallelism (each micro-batch's router statistics go forward with its
#    activations and come back complete with its gradients, the aux loss pooling layers of
#    both stages): pp=2 (1F1B, GPipe), pp=2 x ep=2 x dp=2 with ZeRO-1 and activation
#    checkpointing and with ZeRO-3, pp=2 x tp=2, pp=2 with experts folded on tp=2, and virtual
#    stages (vpp=2 on one rank and on two) equal one process, gradient norms too; the step's
#    aux loss and every layer's load are the whole model's; the pp=2 x ep=2 checkpoint holds
#    every tensor once, and the ep=2 checkpoint resumes under pp=2 x ep=2;
#  - metrics.jsonl's moe_ep_load (the busiest expert rank's routed pairs over the mean rank's):
#    equal to moe_load with one expert a rank (ep=4, 4 experts), within [1, min(ep, moe_load)]
#    at ep=2, absent on one process;
#  - refusals: ep not dividing dp or the experts, tp not dividing the experts' inner size,
#    Megatron sequence parallelism with MoE layers, folded experts with cp, naming the keys.
. "$(dirname "$0")/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }

MOE=(model.preset=tiny-qwen3-moe model.vocab_size=300 model.layers=3 model.moe.mlp_only_layers=1
  model.moe.experts=4 model.moe.top_k=2
  model.moe.z_loss_coef=0.001 model.moe.bias_update_rate=0.001 training.seq_len=32
  training.micro_batch_size=1 training.steps=20 training.warmup_steps=2 training.log_every=5
  data.train_shards="$WORK/train.bin" checkpoint.every=0)
FP32=1e-5 W32=1e-4

echo "expert parallelism against one process (4 micro-batches of one sequence a step)"
train e_single 1 "${MOE[@]}" training.grad_accum=4
train e_ep2 2 "${MOE[@]}" training.grad_accum=2 parallel.dp=2 parallel.ep=2 &&
  { close_losses e_single e_ep2 $FP32; close_weights e_single e_ep2 $W32; }
for z in 1 2 3; do
  train e_ep2_zero$z 2 "${MOE[@]}" training.grad_accum=2 parallel.dp=2 parallel.ep=2 parallel.zero=$z &&
    { close_losses e_single e_ep2_zero$z $FP32; close_weights e_single e_ep2_zero$z $W32; }
done
train e_ep2_dp4 4 "${MOE[@]}" parallel.dp=4 parallel.ep=2 &&
  { close_losses e_single e_ep2_dp4 $FP32; close_weights e_single e_ep2_dp4 $W32; }
for z in 1 3; do # two expert groups: the experts' moments sharded over them (edp = 2)
  train e_ep2_dp4_zero$z 4 "${MOE[@]}" parallel.dp=4 parallel.ep=2 parallel.zero=$z &&
    { close_losses e_single e_ep2_dp4_zero$z $FP32; close_weights e_single e_ep2_dp4_zero$z $W32; }
done
train e_ep4 4 "${MOE[@]}" parallel.dp=4 parallel.ep=4 &&
  { close_losses e_single e_ep4 $FP32; close_weights e_single e_ep4 $W32; }
check "ep=2: the all-to-alls ran (comm bytes of all-to-all)" \
  grep -q '"all-to-all"' "$(run_dir e_ep2)/comm.json"
# moe_ep_load: per MoE layer the busiest expert-parallel rank's routed pairs over the mean rank's
ep_loads() { grep -o "\"$2\": \[[^]]*\]" "$(run_dir "$1")/metrics.jsonl" | sed 's/.*\[//; s/\]//; s/,//g'; }
check "ep=4 with 4 experts (one a rank): every step's rank loads = its expert loads" \
  test "$(ep_loads e_ep4 moe_ep_load)" = "$(ep_loads e_ep4 moe_load)" -a -n "$(ep_loads e_ep4 moe_ep_load)"
check "ep=2: 1 <= rank load <= min(2, expert load max/mean), every layer and step" \
  awk 'NR == FNR { a[NR] = $0; next } { n = split(a[FNR], e, " "); m = split($0, r, " ")
    if (n != m || n == 0) bad = 1
    for (i = 1; i <= n; i++) if (r[i] < 1 || r[i] > 2 || r[i] > e[i] + 1e-9) bad = 1
    k++ } END { exit bad || k != 20 }' <(ep_loads e_ep2 moe_load) <(ep_loads e_ep2 moe_ep_load)
check "one process: no rank loads (the experts are not split)" \
  test -z "$(ep_loads e_single moe_ep_load)"

echo "tensor parallelism: each tp rank a slice of every expert, ep folded over the dp ranks"
norms() { sed -n 's/.*"grad_norm": \([^,}]*\).*/\1/p' "$(run_dir "$1")/metrics.jsonl"; }
close_norms() { # A B RTOL: every step's gradient norm (before clipping) within RTOL relative
  local worst
  worst=$(paste <(norms "$1") <(norms "$2") | awk -v t="$3" '
    { r = ($1 - $2) / $1; if (r < 0) r = -r; if (r > w) w = r } END { printf "%.2e", w; exit (w > t || NR == 0) }')
  check "$2: gradient norms = one process's within $3 (worst $worst)" test $? = 0
}
# like_one_process REF CASE...: each CASE "name|ranks|grad_accum|overrides" trained on MOE,
# its losses, final weights and gradient norms compared with run REF's
like_one_process() {
  local ref=$1 c name np ga extra
  shift
  for c in "$@"; do
    IFS='|' read -r name np ga extra <<<"$c"
    # shellcheck disable=SC2086
    train "$name" "$np" "${MOE[@]}" training.grad_accum=$ga $extra &&
      { close_losses "$ref" "$name" $FP32; close_weights "$ref" "$name" $W32; close_norms "$ref" "$name" $FP32; }
  done
}
EP2TP2="parallel.tp=2 parallel.dp=2 parallel.ep=2" FOLD="parallel.tp=2 parallel.etp=1 parallel.ep=2"
like_one_process e_single "e_tp2|2|4|parallel.tp=2" \
  "e_ep2_tp2_dp2_zero0|4|2|$EP2TP2 parallel.zero=0" "e_ep2_tp2_dp2_zero1|4|2|$EP2TP2 parallel.zero=1" \
  "e_fold_tp2|2|4|$FOLD" "e_fold_tp2_dp2_zero1|4|2|$FOLD parallel.dp=2 parallel.zero=1"
echo "sequence splits: Ulysses sp and context parallelism, alone and with ep"
like_one_process e_single "e_sp2|2|4|parallel.sp=2" "e_cp2|2|4|parallel.cp=2" \
  "e_ep2_sp2_dp2|4|2|parallel.sp=2 parallel.dp=2 parallel.ep=2" \
  "e_ep2_cp2_dp2_zero1|4|2|parallel.cp=2 parallel.dp=2 parallel.ep=2 parallel.zero=1"
SH=(model.moe.shared_intermediate=48)
train e_shared_single 1 "${MOE[@]}" "${SH[@]}" training.grad_accum=4
train e_shared_tp2 2 "${MOE[@]}" "${SH[@]}" training.grad_accum=4 parallel.tp=2 &&
  { close_losses e_shared_single e_shared_tp2 $FP32; close_weights e_shared_single e_shared_tp2 $W32; }
train e_bf16_single 1 "${MOE[@]}" training.dtype=bf16 training.grad_accum=4
train e_bf16_tp2 2 "${MOE[@]}" training.dtype=bf16 training.grad_accum=4 parallel.tp=2 &&
  close_losses e_bf16_single e_bf16_tp2 2e-3

echo "capacity dropping with expert parallelism: the plan is the token's own rank's"
CAP=(model.moe.capacity_factor=1.0 model.moe.drop_policy=position)
train e_cap_single 1 "${MOE[@]}" training.grad_accum=4 "${CAP[@]}"
train e_cap_ep2 2 "${MOE[@]}" training.grad_accum=2 parallel.dp=2 parallel.ep=2 "${CAP[@]}" &&
  close_losses e_cap_single e_cap_ep2 $FP32
check "capacity: pairs were dropped" grep -q '"moe_dropped": \[[1-9]' "$(run_dir e_cap_ep2)/metrics.jsonl"

echo "validation and activation checkpointing with ep=2 (every rank evaluates its batches)"
V=("${MOE[@]}" training.steps=6 data.val_fraction=0.1 training.eval_every=3 training.grad_accum=2 parallel.dp=2)
train e_val_dp2 2 "${V[@]}"
train e_val_ep2 2 "${V[@]}" parallel.ep=2 && close_val_losses e_val_dp2 e_val_ep2 $FP32
train e_val_ep2_rc 2 "${V[@]}" parallel.ep=2 training.activation_checkpointing=true
check "ep=2: activation checkpointing gives the same losses bit for bit" \
  test "$(losses "$(run_dir e_val_ep2)")" = "$(losses "$(run_dir e_val_ep2_rc)")"

echo "bf16: ep=2 against dp=2 on the same micro-batches"
BF=(training.dtype=bf16 training.grad_accum=2 parallel.dp=2)
train e_bf16_dp2 2 "${MOE[@]}" "${BF[@]}"
train e_bf16_ep2 2 "${MOE[@]}" "${BF[@]}" parallel.ep=2 && close_losses e_bf16_dp2 e_bf16_ep2 2e-3

echo "a checkpoint written with ep=2 loads and resumes in one process"
R=(run.output_dir="$WORK/resume" "${MOE[@]}" training.steps=12 checkpoint.every=6)
timeout 300 "${MPIRUN[@]}" -np 2 "$LOOM" train "${R[@]}" training.grad_accum=2 parallel.dp=2 \
  parallel.ep=2 run.name=ep2 --quiet >"$WORK/resume_ep2.log" 2>&1
E2=$(ls -d "$WORK"/resume/ep2_* | head -1)
check "ep=2 wrote checkpoint_6" test -f "$E2/checkpoint_6/COMPLETE"
# its parameters as one process loads them (no step: the final checkpoint is what was loaded)
"$LOOM" train "${MOE[@]}" checkpoint.init_from="$E2/checkpoint_6" training.steps=0 \
  run.output_dir="$WORK/loaded" --quiet >"$WORK/loaded.log" 2>&1
out=$("$LOOM" ckpt compare "$E2/checkpoint_6" "$(ls -d "$WORK"/loaded/*/ | head -1)final_checkpoint" --rtol 0 2>&1)
check "loaded in one process: parameters equal exactly ($(echo "$out" | tail -1 | cut -c1-60))" \
  test -n "$out" -a "$(echo "$out" | tail -1 | grep -c '0 tensors beyond')" = 1
for i in 1 2; do
  "$LOOM" train --resume "$E2/checkpoint_6" training.grad_accum=4 parallel.dp=1 parallel.ep=1 \
    run.output_dir="$WORK/resume$i" --quiet >"$WORK/resume$i.log" 2>&1
done
a=$(ls -d "$WORK"/resume1/*/ | head -1) b=$(ls -d "$WORK"/resume2/*/ | head -1)
check "resumed in one process: 6 losses" test "$(losses "$a" | wc -l)" = 6
check "resumed in one process twice: the same losses bit for bit" \
  test "$(losses "$a")" = "$(losses "$b")"
worst=$(paste <(losses "$E2" | tail -6) <(losses "$a") | awk '
  { r = ($1 - $2) / $1; if (r < 0) r = -r; if (r > w) w = r } END { printf "%.2e", w; exit (w > 1e-5) }')
check "resumed in one process: steps 7-12 = the ep=2 run's within 1e-5 (worst $worst)" test $? = 0
out=$("$LOOM" ckpt compare "$E2/final_checkpoint" "${a}final_checkpoint" --rtol 1e-4 --ignore attn.k.bias 2>&1)
check "resumed in one process: final weights = the ep=2 run's ($(echo "$out" | tail -1 | cut -c1-70))" \
  test "$(echo "$out" | tail -1 | grep -c ' 0 tensors beyond')" = 1

echo "each rank holds only its experts (checkpoint files, memory)"
held() { # checkpoint: every tensor's file(s), as 'name rank' lines (pieces: the tensor's name)
  python3 - "$1" <<'PY'
import json, os, re, struct, sys
d = sys.argv[1]
for f in sorted(os.listdir(d)):
    m = re.match(r"(model|optimizer)(?:-r(\d+))?\.safetensors$", f)
    if not m: continue
    with open(os.path.join(d, f), "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        h = json.loads(fh.read(n))
    pieces = json.loads(h.get("__metadata__", {}).get("loom.pieces", "{}"))
    for k in h:
        if k != "__metadata__":
            kind, name = m.group(1), pieces.get(k, {}).get("tensor", k)
            for pre in ("exp_avg_sq.", "exp_avg."):  # the moments: one kind each
                if k.startswith(pre):
                    kind, name = pre[:-1], name[len(pre):] if name.startswith(pre) else name
            print(kind, name, int(m.group(2) or 0))
PY
}
once() { # what, held-lines: every (kind, tensor) at most once per rank, experts on their rank
  local bad
  bad=$(echo "$2" | awk '{ n[$1" "$2" "$3]++ } $2 ~ /experts/ { split($2, a, "."); e = a[5]
    if ($3 % 2 != int(e / 2)) print "expert " e " on rank " $3 }
    END { for (k in n) if (n[k] > 1) print k " twice" }')
  if [ -z "$bad" ]; then pass; else fail "$1: $(echo "$bad" | head -3 | tr '\n' ';')"; fi
}
H=$(held "$(run_dir e_ep2_dp4)/final_checkpoint")
once "ep=2 x dp=4: experts 0-1 on rank 0, 2-3 on rank 1, each tensor once" "$H"
check "ep=2 x dp=4: ranks 2-3 (the second expert group) write nothing" \
  test "$(echo "$H" | awk '$3 >= 2' | wc -l)" = 0
check "ep=2 x dp=4: rank 1 writes its experts only (no dense tensor)" \
  test "$(echo "$H" | awk '$3 == 1 && $2 !~ /experts/' | wc -l)" = 0
n_ep=$(echo "$H" | awk '$1 == "model" { print $2 }' | sort -u | wc -l)
n_one=$(held "$(run_dir e_single)/final_checkpoint" | awk '$1 == "model"' | wc -l)
check "ep=2 x dp=4: the checkpoint holds every tensor of the model ($n_ep of $n_one)" \
  test "$n_ep" = "$n_one" -a "$n_one" -gt 0
H=$(held "$(run_dir e_ep2_dp4_zero1)/final_checkpoint")
once "ep=2 x dp=4 ZeRO-1: experts' weights and moment shards on their expert group only" "$H"
check "ep=2 x dp=4 ZeRO-1: the experts' moments are sharded over both groups" \
  test "$(echo "$H" | awk '$1 == "exp_avg" && $2 ~ /experts/ { print $3 }' | sort -u | tr -d '\n')" = 0123
check "ep=2 x dp=4 ZeRO-1: the experts' weights come from the first group only" \
  test "$(echo "$H" | awk '$1 == "model" && $2 ~ /experts/ { print $3 }' | sort -u | tr -d '\n')" = 01
H=$(held "$(run_dir e_ep2_zero3)/final_checkpoint")
once "ep=2 ZeRO-3: experts on their rank only" "$H"
check "ep=2 ZeRO-3: both ranks hold a dense shard" \
  test "$(echo "$H" | awk '$1 == "model" && $2 !~ /experts/ { print $3 }' | sort -u | wc -l)" = 2
mem() { # params MiB of rank 0 in the memory table of a run (4 ranks, 8 experts)
  timeout 300 "${MPIRUN[@]}" -np 4 "$LOOM" train "${MOE[@]}" model.moe.experts=8 training.steps=1 \
    parallel.dp=4 "$@" run.output_dir="$WORK/mem" 2>&1 | awk '/^memory per rank/ { t = 1; next } t && $1 == 0 { print $2; exit }'
}
m_dp=$(mem parallel.ep=1) m_ep=$(mem parallel.ep=4)
check "ep=4 holds fewer parameters per rank than dp=4 ($m_ep vs $m_dp MiB)" \
  awk -v a="$m_ep" -v b="$m_dp" 'BEGIN { exit !(a > 0 && a < b) }'

echo "pipeline parallelism: each micro-batch's router statistics travel with it between stages"
# The aux loss pools every MoE layer of a micro-batch (HF), so a stage's backward needs the
# totals of stages it does not run: layers 0 and 2 are MoE layers, on different stages.
like_one_process e_single "e_pp2|2|4|parallel.pp=2" "e_pp2_gpipe|2|4|parallel.pp=2 parallel.schedule=gpipe" \
  "e_pp2_ep2_dp2_zero1_ac|4|2|parallel.pp=2 parallel.dp=2 parallel.ep=2 parallel.zero=1 training.activation_checkpointing=true" \
  "e_pp2_ep2_dp2_zero3|4|2|parallel.pp=2 parallel.dp=2 parallel.ep=2 parallel.zero=3" \
  "e_pp2_tp2|4|4|parallel.pp=2 parallel.tp=2" "e_pp2_fold_tp2|4|4|parallel.pp=2 $FOLD"
check "pp=2: the step's aux loss is the whole model's (every stage's layers: 1e-5 of one process)" \
  awk -v a="$(sed -n 's/.*"aux_loss": \([^,]*\),.*/\1/p' "$(run_dir e_single)/metrics.jsonl" | tail -1)" \
    -v b="$(sed -n 's/.*"aux_loss": \([^,]*\),.*/\1/p' "$(run_dir e_pp2_ep2_dp2_zero3)/metrics.jsonl" | tail -1)" \
    'BEGIN { r = (a - b) / a; if (r < 0) r = -r; exit !(a > 0 && r < 1e-5) }'
check "pp=2: every MoE layer's load reported (one stage holds each)" \
  test "$(grep -o '"moe_load": [^]]*]' "$(run_dir e_pp2_ep2_dp2_zero3)/metrics.jsonl" | tail -1)" = \
       "$(grep -o '"moe_load": [^]]*]' "$(run_dir e_single)/metrics.jsonl" | tail -1)"
# virtual stages: 4 layers (0, 2, 3 MoE), two chunks a rank, on one rank and on two
M4=("${MOE[@]}" model.layers=4 training.grad_accum=4)
train e4_single 1 "${M4[@]}"
for c in "e4_vpp2|1|parallel.vpp=2 parallel.schedule=interleaved" \
    "e4_pp2_vpp2|2|parallel.pp=2 parallel.vpp=2 parallel.schedule=interleaved"; do
  IFS='|' read -r name np extra <<<"$c"
  # shellcheck disable=SC2086
  train "$name" "$np" "${M4[@]}" $extra &&
    { close_losses e4_single "$name" $FP32; close_weights e4_single "$name" $W32; }
done
H=$(held "$(run_dir e_pp2_ep2_dp2_zero1_ac)/final_checkpoint")
check "pp=2 x ep=2 x dp=2: the checkpoint holds every tensor of the model once" \
  test "$(echo "$H" | awk '$1 == "model" { print $2 }' | sort | uniq -c | awk '$1 == 1' | wc -l)" = "$n_one"

echo "reshard: the ep=2 checkpoint resumes under other layouts like the ep=2 run continues"
reshard() { # name np overrides...
  local name=$1 np=$2; shift 2
  timeout 300 "${MPIRUN[@]}" -np "$np" "$LOOM" train --resume "$E2/checkpoint_6" "$@" \
    run.output_dir="$WORK/$name" --quiet >"$WORK/$name.log" 2>&1 ||
    { fail "$name: resume failed: $(tail -2 "$WORK/$name.log")"; return; }
  local r worst
  r=$(ls -d "$WORK/$name"/*/ | head -1)
  worst=$(paste <(losses "$E2" | tail -6) <(losses "$r") | awk '
    { r = ($1 - $2) / $1; if (r < 0) r = -r; if (r > w) w = r } END { printf "%.2e", w; exit (w > 1e-5 || NR != 6) }')
  check "$name: steps 7-12 = the ep=2 run's within 1e-5 (worst $worst)" test $? = 0
  out=$("$LOOM" ckpt compare "$E2/final_checkpoint" "${r}final_checkpoint" --rtol 1e-4 --ignore attn.k.bias 2>&1)
  check "$name: final weights = the ep=2 run's ($(echo "$out" | tail -1 | cut -c1-60))" \
    test "$(echo "$out" | tail -1 | grep -c ' 0 tensors beyond')" = 1
}
reshard ep4_dp4 4 parallel.dp=4 parallel.ep=4 training.grad_accum=1
reshard ep2_zero2 2 parallel.dp=2 parallel.ep=2 parallel.zero=2 training.grad_accum=2
reshard ep2_dp4_zero1 4 parallel.dp=4 parallel.ep=2 parallel.zero=1 training.grad_accum=1
reshard tp2_experts_split 2 parallel.dp=1 parallel.ep=1 parallel.tp=2 training.grad_accum=4
reshard tp2_experts_folded 2 parallel.dp=1 parallel.tp=2 parallel.etp=1 parallel.ep=2 training.grad_accum=4
reshard pp2_ep2_dp2 4 parallel.pp=2 parallel.dp=2 parallel.ep=2 training.grad_accum=2

echo "kill -9 while the rank holding only experts writes a checkpoint"
K=("${MOE[@]}" training.steps=9 checkpoint.every=3 training.grad_accum=2 parallel.dp=2 parallel.ep=2 parallel.zero=1)
kjob() { timeout 300 "${MPIRUN[@]}" -np 2 "$LOOM" train "${K[@]}" "$@" --quiet; }
kjob run.output_dir="$WORK/k_ref" >"$WORK/k_ref.log" 2>&1
LOOM_FAULT=kill-save:1:6 kjob run.output_dir="$WORK/k" >"$WORK/k1.log" 2>&1
check "the killed job failed" test $? != 0
KD=$(ls -d "$WORK"/k/*/ | head -1)
check "after the kill: checkpoint_3 complete, no checkpoint_6 (only its .tmp at most)" \
  test -f "$KD/checkpoint_3/COMPLETE" -a ! -e "$KD/checkpoint_6"
kjob run.output_dir="$WORK/k" --resume latest >"$WORK/k2.log" 2>&1
check "--resume latest finished ($(tail -1 "$WORK/k2.log" | cut -c1-60))" test $? = 0
RD=$(ls -d "$WORK"/k_ref/*/ | head -1)
check "resumed after the kill: the uninterrupted losses bit for bit" \
  test "$(losses "$RD")" = "$(losses "$KD")" -a -n "$(losses "$KD")"
same=1
for f in "$RD"/final_checkpoint/*.safetensors; do cmp -s "$f" "$KD/final_checkpoint/$(basename "$f")" || same=0; done
check "resumed after the kill: final checkpoint files byte-identical" test $same = 1

echo "refusals"
SHORT=("${MOE[@]}" training.steps=2)
refused 1 parallel.dp "parallel.ep = 2 does not divide parallel.dp = 1" "${SHORT[@]}" parallel.ep=2
refused 3 model.moe.experts "parallel.ep = 3 does not divide model.moe.experts = 4" "${SHORT[@]}" parallel.ep=3 parallel.dp=3
refused 2 parallel.sp_mode "parallel.sp_mode = megatron with Mixture-of-Experts" "${SHORT[@]}" parallel.tp=2 parallel.sp_mode=megatron
refused 2 model.moe.intermediate "must divide model.moe.intermediate" "${SHORT[@]}" parallel.tp=2 model.moe.shared_intermediate=33
refused 4 parallel.cp "runs with tp, dp and pp only" "${SHORT[@]}" parallel.tp=2 parallel.etp=1 parallel.ep=2 parallel.cp=2
finish
