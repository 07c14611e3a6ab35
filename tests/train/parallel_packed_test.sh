#!/usr/bin/env bash
# Packed documents (data.pack_documents) in every layout: a packed training run equals the
# same packed run on one process — per-step losses, final weights and validation losses —
# under tensor parallelism, Megatron and Ulysses sequence parallelism, data x pipeline
# parallelism with ZeRO-1, ZeRO-3, and context parallelism (cp2, cp4, cp2 x tp2,
# cp2 x Ulysses sp2, cp2 x dp2), for Llama (rotary positions restart per document) and GPT-2
# (learned positions restart per document). Every rank derives the document segments from the
# whole micro-batch's tokens, so a layout that split or exchanged them wrongly would attend
# across documents and move the losses by far more than the tolerance.
#
# Tolerances: those of equivalence_test.sh (fp32: per-step loss 1e-5 relative, final weights
# 1e-4 relative norm per tensor; the layouts only reorder fp32 sums). The packed run's losses
# must differ from the unpacked run's on the same shards by more than 1e-3 (packing changes
# what every token after the first end-of-document token sees). Also: data.pack_documents
# on shards that record no end-of-document token, and with vqa data, is refused before a run
# directory exists; `loom eval` of a packed run's checkpoint repeats its last validation loss
# digit for digit.
. "$(dirname "$0")/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }

# documents: the corpus' sentences, one file each, tokenized with --eot (each ends with
# <|endoftext|>; the shard records it as its end-of-document token, version 2)
mkdir -p "$WORK/docs"
awk -v dir="$WORK/docs" 'BEGIN { RS = "[.!?][\" ]*[ \n]+" }
  NF { n++; f = sprintf("%s/%05d.txt", dir, n); printf "%s.", $0 > f; close(f) }' "$WORK/corpus.txt"
ndocs=$(ls "$WORK/docs" | wc -l)
"$LOOM" data tokenize --eot --tokenizer "$WORK/tok.json" --out "$WORK/docs.bin" "$WORK"/docs/*.txt \
  >"$WORK/tokenize.log" 2>&1 || { fail "tokenize --eot"; cat "$WORK/tokenize.log"; finish; exit; }
ntok=$(sed -n 's/^\([0-9]*\) tokens.*/\1/p' "$WORK/tokenize.log")
echo "$ndocs documents, $ntok tokens ($((ntok / ndocs)) per document) in windows of 64"
check "at least 3 documents per 64-token window on average" test $((ntok / ndocs)) -le 21

LLAMA=(model.preset=tiny-llama model.vocab_size=301 model.vocab_pad_multiple=1 model.layers=3
  model.hidden=64 model.heads=4 model.kv_heads=2 model.intermediate=96 training.seq_len=64
  training.steps=4 training.warmup_steps=2 data.train_shards="$WORK/docs.bin"
  data.val_fraction=0.1 training.eval_every=2 training.eval_batches=2 checkpoint.every=0)
GPT2=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=4 model.hidden=64
  model.intermediate=128 training.seq_len=64 training.steps=4 training.warmup_steps=2
  data.train_shards="$WORK/docs.bin" checkpoint.every=0 data.val_fraction=0.1
  training.eval_every=2 training.eval_batches=2)
FP32=1e-5 W32=1e-4

check_case() { # name np overrides...
  local name=$1 np=$2; shift 2
  train "$name" "$np" "$@" && { close_losses "$BASE" "$name" "$FP32"; close_weights "$BASE" "$name" "$W32"
    close_val_losses "$BASE" "$name" "$FP32"; }
}
# far: every loss of run B differs from run A's by more than 1e-3 relative at some step
differs() {
  local worst
  worst=$(paste <(losses "$(run_dir "$1")") <(losses "$(run_dir "$2")") | awk '
    { r = ($1 - $2) / $1; if (r < 0) r = -r; if (r > w) w = r } END { printf "%.2e", w; exit (w <= 1e-3) }')
  if [ $? = 0 ]; then pass; echo "  $2 vs $1: losses differ by up to $worst relative (packing matters)";
  else fail "$2: losses within $worst of $1: packing changed nothing"; fi
}

echo "Llama, packed documents, 2 micro-batches of 4 sequences per step"
train pl_single 1 "${LLAMA[@]}" data.pack_documents=true training.micro_batch_size=4 training.grad_accum=2
train ul_single 1 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=2
differs ul_single pl_single
BASE=pl_single
check_case pl_tp2 2 "${LLAMA[@]}" data.pack_documents=true training.micro_batch_size=4 training.grad_accum=2 parallel.tp=2
check_case pl_tp2_megatron_sp 2 "${LLAMA[@]}" data.pack_documents=true training.micro_batch_size=4 training.grad_accum=2 parallel.tp=2 parallel.sp_mode=megatron
check_case pl_ulysses2 2 "${LLAMA[@]}" data.pack_documents=true training.micro_batch_size=4 training.grad_accum=2 parallel.sp=2
check_case pl_dp2_zero3 2 "${LLAMA[@]}" data.pack_documents=true training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.zero=3
check_case pl_dp2_pp2_zero1 4 "${LLAMA[@]}" data.pack_documents=true training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.pp=2 parallel.zero=1
# context parallelism: ring attention masks every (query chunk, key chunk) block by the
# documents at the chunks' global positions and skips blocks sharing no document
check_case pl_cp2 2 "${LLAMA[@]}" data.pack_documents=true training.micro_batch_size=4 training.grad_accum=2 parallel.cp=2
check_case pl_cp2_tp2 4 "${LLAMA[@]}" data.pack_documents=true training.micro_batch_size=4 training.grad_accum=2 parallel.cp=2 parallel.tp=2
check_case pl_cp4 4 "${LLAMA[@]}" data.pack_documents=true training.micro_batch_size=4 training.grad_accum=2 parallel.cp=4
check_case pl_cp2_ulysses2 4 "${LLAMA[@]}" data.pack_documents=true training.micro_batch_size=4 training.grad_accum=2 parallel.cp=2 parallel.sp=2

echo "loom eval of a packed run packs its validation data the same way"
last=$(val_losses "$(run_dir pl_single)" | tail -1 | cut -d' ' -f2)
got=$("$LOOM" eval "$(run_dir pl_single)/final_checkpoint" --json 2>&1)
check "loom eval = the packed run's final val loss, every digit ($last): $got" \
  test "$(echo "$got" | sed -n 's/.*"val_loss": \([^,]*\),.*/\1/p')" = "$last"
got=$("$LOOM" eval "$(run_dir pl_single)/final_checkpoint" --json data.pack_documents=false 2>&1)
check "the same checkpoint scored unpacked differs: $got" \
  test "$(echo "$got" | sed -n 's/.*"val_loss": \([^,]*\),.*/\1/p')" != "$last"

echo "GPT-2 (learned positions), packed documents"
train pg_single 1 "${GPT2[@]}" data.pack_documents=true training.micro_batch_size=4 training.grad_accum=2
train ug_single 1 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2
differs ug_single pg_single
BASE=pg_single
check_case pg_tp2 2 "${GPT2[@]}" data.pack_documents=true training.micro_batch_size=4 training.grad_accum=2 parallel.tp=2
check_case pg_ulysses2 2 "${GPT2[@]}" data.pack_documents=true training.micro_batch_size=4 training.grad_accum=2 parallel.sp=2
check_case pg_dp2_pp2 4 "${GPT2[@]}" data.pack_documents=true training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.pp=2
check_case pg_cp2_dp2 4 "${GPT2[@]}" data.pack_documents=true training.micro_batch_size=2 training.grad_accum=2 parallel.cp=2 parallel.dp=2

echo "refusals"
out=$("$LOOM" train "${LLAMA[@]}" data.train_shards="$WORK/train.bin" data.pack_documents=true \
  run.name=refused run.output_dir="$WORK/runs" --quiet 2>&1); rc=$?
check "shard without end-of-document token refused (rc $rc): $out" test "$rc" != 0
check "the message names the key, the file and the remedy: $out" \
  grep -q "data.train_shards: data.pack_documents: token shard '$WORK/train.bin' (version 1) records no end-of-document token; re-create it with 'loom data tokenize --eot'" <<<"$out"
check "no run directory for a refused run" test -z "$(ls -d "$WORK"/runs/refused_* 2>/dev/null)"
out=$("$LOOM" train model.preset=tiny-qwen2.5-vl data.format=vqa data.vqa_path="$WORK" \
  data.tokenizer="$WORK/tok.json" data.pack_documents=true run.name=refused_vqa \
  run.output_dir="$WORK/runs" --quiet 2>&1); rc=$?
check "vqa data with pack_documents refused (rc $rc): $out" test "$rc" != 0
check "the vqa message says nothing is packed: $out" grep -q "data.format vqa puts one sample per sequence" <<<"$out"
finish
