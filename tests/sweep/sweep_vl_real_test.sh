#!/usr/bin/env bash
# Seed 000's sweep file (configs/sweeps/qwen_vl_grid.yaml) trained for real: the command-line
# overrides fix a tiny Qwen2.5-VL on 2 ranks (text tp 2), 448 px images (1k vision tokens),
# batch 2 and 3 steps, leaving the vision strategy swept: the encoder sequence-parallel
# (vision.parallel.sp = the text's tp, through "${parallel.tp}") and tensor-parallel, under
# mpirun -np 2 with the local launcher. Both points succeed with the encoder laid out as asked,
# the summary's numbers are the runs' own, and the two layouts train the same run (losses
# agree to bf16 precision). Needs Open MPI's mpirun.
. "$(dirname "$0")/../experiments.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 1; }
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 # Open MPI's allocations
cd "$WORK" || exit 1
"$LOOM" data synth-vqa --out "$WORK/vqa" --samples 16 --shard-size 16 > /dev/null ||
  { echo "could not make test data"; exit 1; }
"$LOOM" sweep run "$SRC/configs/sweeps/qwen_vl_grid.yaml" --launcher local --log-dir "$WORK/logs" \
  model.preset=tiny-qwen2.5-vl model.vocab_size=384 parallel.tp=2 \
  data.vqa_path="$WORK/vqa" data.tokenizer="$WORK/vqa/tokenizer.json" \
  data.image_min_pixels=200704 data.image_max_pixels=200704 training.seq_len=512 \
  training.micro_batch_size=2 training.steps=3 run.output_dir="$WORK/runs" > "$WORK/out.txt" 2>&1
rc=$?
check "real sweep exits 0" test $rc = 0
LOG=$(ls -d "$WORK"/logs/sweep_*)
[ $rc = 0 ] || tail -n 20 "$WORK/out.txt" "$LOG"/*.log >&2
SP=tiny-qwen2.5-vl_tp2_vsp2_vtp1_img448_bs2
TP=tiny-qwen2.5-vl_tp2_vsp1_vtp2_img448_bs2
check "2 points: the vision strategies (the rest fixed on the command line)" \
  test "$(($(wc -l < "$LOG/summary.csv") - 1))" = 2
for n in $SP $TP; do
  check "$n: SUCCESS" test "$(csv_row "$LOG/summary.csv" name $n status)" = SUCCESS
  check "$n: 2 ranks under mpirun" grep -q "command: 'mpirun' '-np' '2'" "$LOG/$n.log"
done
check "vision sp: the encoder's mesh is sp 2 x tp 1" grep -q "vision encoder: .*sp 2 x tp 1" "$LOG/$SP.log"
check "vision tp: the encoder's mesh is sp 1 x tp 2" grep -q "vision encoder: .*sp 1 x tp 2" "$LOG/$TP.log"
check "the text is tp 2 in both" test "$(grep -c 'mesh: 2 ranks = .*tp 2' "$LOG/$SP.log" "$LOG/$TP.log" | grep -c ':1$')" = 2
check_summary_numbers "$LOG"
check "both vision layouts train the same run (final losses within 1e-2)" \
  close_to "$(csv_row "$LOG/summary.csv" name $SP final_loss)" "$(csv_row "$LOG/summary.csv" name $TP final_loss)" 1e-2
finish
