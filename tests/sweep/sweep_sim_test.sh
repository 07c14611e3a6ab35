#!/usr/bin/env bash
# `loom sweep run --launcher sim` on seed 000's grid (configs/sweeps/qwen_vl_grid.yaml:
# Qwen2.5-VL 7B on 4 and 32B on 8 H100s, 1k..64k vision tokens, vision sp vs tp, batch
# 1/2/4/8): the 96 points finish in seconds with one summary row each; a point is OOM exactly
# when the memory the simulator reports for it exceeds the profile's usable memory (device
# memory less reserved, read from configs/hardware), and fits otherwise; OOM only grows with
# tokens and batch; the iteration time grows with vision tokens and batch; vision sequence
# parallelism is not slower than vision tensor parallelism from 16k vision tokens on (the
# seed's finding); the numbers are those of `loom sim` on the point's config; the vision
# strategy reaches the simulator; --hardware replaces the file's profile; and bad input
# (unknown hardware, a mesh the model cannot be split by, a vision layout the simulator
# cannot model, --hardware with another launcher) gives a clear error or a FAILED point.
. "$(dirname "$0")/../experiments.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
GRID=$SRC/configs/sweeps/qwen_vl_grid.yaml
cd "$WORK" || exit 1

# ---- the grid on the simulator --------------------------------------------------------------
t0=$(date +%s.%N)
"$LOOM" sweep run "$GRID" --launcher sim --log-dir "$WORK/logs" > "$WORK/out.txt" 2>&1
rc=$?
t1=$(date +%s.%N)
check "sim sweep exits 0 (OOM points are results, not failures)" test $rc = 0
[ $rc = 0 ] || tail -n 20 "$WORK/out.txt" >&2
check "96 points in seconds (took $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s)" \
  awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 10) }'
LOG=$(ls -d "$WORK"/logs/sweep_*)
CSV=$LOG/summary.csv
check "summary.csv: 96 rows" test "$(($(wc -l < "$CSV") - 1))" = 96
check "summary.txt: 96 table rows" test "$(grep -c '^qwen2.5-vl-' "$LOG/summary.txt")" = 96
check "summary.txt names the launcher and hardware" grep -q '^launcher: sim, hardware h100-sxm-hf$' "$LOG/summary.txt"
check "summary.txt header has GiB and MFU" grep -q 'MFU (%) .*Peak Mem/Rank (GiB)' "$LOG/summary.txt"
check "no FAILED point" test "$(awk -F, 'NR > 1 && $2 == "FAILED"' "$CSV" | wc -l)" = 0
check "the runner's line says OOM" grep -q '^\[[ 0-9]*/96\] OOM *qwen2.5-vl-' "$WORK/out.txt"
check "done line counts the OOM points" grep -q 'succeeded, [0-9]* out of memory, 0 failed' "$WORK/out.txt"

# usable memory of the profile: memory_gib - memory_reserved_gib
hw_limit() { # profile -> GiB
  awk '/^ *memory_gib:/ { m = $2 } /^ *memory_reserved_gib:/ { r = $2 } END { printf "%.6f", m - r }' \
    "$SRC/configs/hardware/$1.yaml"
}
LIMIT=$(hw_limit h100-sxm-hf)
# one line per point: model vision side batch status avg_s mem_gib sim_mem_gib sim_limit_gib
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
  { print $c["name"], $c["status"], $c["avg_iter_time_s"], $c["peak_mem_gib_per_rank"], $c["run_dir"] }' "$CSV" |
while read -r name status avg mem dir; do
  # the simulator's own numbers for the point: largest stage memory and the limit (bytes)
  simmem=$(grep -o '"memory": [0-9.e+]*' "$dir/sim.json" | awk '{ if ($2 > m) m = $2 } END { printf "%.6f", m / 1073741824 }')
  simlim=$(sed -n 's/.*"mem_limit": \([0-9.e+]*\).*/\1/p' "$dir/sim.json" | awk '{ printf "%.6f", $1 / 1073741824 }')
  model=${name%%_*}; v=${name#*_vsp}; v=${v%%_*}; side=${name#*_img}; side=${side%%_*}; bs=${name##*_bs}
  echo "$model $([ "$v" = 1 ] && echo tp || echo sp) $side $bs $status $avg $mem $simmem $simlim"
done > "$WORK/points.txt"
check "every point has the simulator's numbers" test "$(awk 'NF == 9' "$WORK/points.txt" | wc -l)" = 96
check "the simulator's limit is the profile's usable memory ($LIMIT GiB)" \
  awk -v l="$LIMIT" '{ d = $9 - l; if (d < 0) d = -d; if (d > 1e-4) bad++ } END { exit bad > 0 }' "$WORK/points.txt"
check "Peak Mem/Rank is the simulator's memory" \
  awk '{ d = $7 - $8; if (d < 0) d = -d; if (d > 1e-6 * $8) bad++ } END { exit bad > 0 }' "$WORK/points.txt"
check "OOM exactly where the memory exceeds the limit" \
  awk '{ over = $8 > $9; if (over != ($5 == "OOM")) { print "  " $0 > "/dev/stderr"; bad++ } } END { exit bad > 0 }' "$WORK/points.txt"
check "the others SUCCESS" awk '$5 != "OOM" && $5 != "SUCCESS" { bad++ } END { exit bad > 0 }' "$WORK/points.txt"
check "some points fit and some are OOM" awk '$5 == "OOM" { o++ } $5 == "SUCCESS" { s++ } END { exit !(o > 0 && s > 0) }' "$WORK/points.txt"
check "the largest point of each model is OOM on H100" \
  awk '$3 == 3584 && $4 == 8 && $5 != "OOM" { bad++ } END { exit bad > 0 }' "$WORK/points.txt"
check "7B with 1k tokens and batch 1 fits" grep -q '^qwen2.5-vl-7b sp 448 1 SUCCESS' "$WORK/points.txt"
# monotone: if (side, batch) is OOM, so is every larger side and batch of the same model/vision
check "OOM only grows with vision tokens and batch" awk '
  { key = $1 " " $2; s[NR] = $3; b[NR] = $4; o[NR] = $5 == "OOM"; k[NR] = key }
  END { for (i = 1; i <= NR; i++) for (j = 1; j <= NR; j++)
          if (k[i] == k[j] && o[i] && !o[j] && s[j] >= s[i] && b[j] >= b[i]) { print "  " i, j > "/dev/stderr"; bad++ }
        exit bad > 0 }' "$WORK/points.txt"
check "iteration time grows with vision tokens" awk '
  { key = $1 " " $2 " " $4; if (key in last && $6 <= last[key]) { print "  " $0 > "/dev/stderr"; bad++ } last[key] = $6 }
  END { exit bad > 0 }' "$WORK/points.txt"
check "iteration time grows with batch" awk '
  { key = $1 " " $2 " " $3; if (key in last && $6 <= last[key]) { print "  " $0 > "/dev/stderr"; bad++ } last[key] = $6 }
  END { exit bad > 0 }' "$WORK/points.txt"
check "vision sp not slower than vision tp from 16k vision tokens (seed 000's finding)" awk '
  $3 >= 1792 { t[$1 " " $3 " " $4 " " $2] = $6 }
  END { for (x in t) { split(x, f, " "); if (f[4] != "sp") continue
          y = f[1] " " f[2] " " f[3] " tp"; n++
          if (t[x] > t[y]) { print "  " x, t[x], t[y] > "/dev/stderr"; bad++ } }
        exit !(n == 24 && bad == 0) }' "$WORK/points.txt"

# the vision strategy reaches the simulator, and the numbers are those of loom sim
check "vision sp in the point's simulation" grep -q 'vision=sp' "$LOG/qwen2.5-vl-7b_tp4_vsp4_vtp1_img1792_bs2.log"
check "vision tp in the point's simulation" grep -q 'vision=tp' "$LOG/qwen2.5-vl-7b_tp4_vsp1_vtp4_img1792_bs2.log"
P=qwen2.5-vl-32b_tp8_vsp8_vtp1_img896_bs4
"$LOOM" sim "$LOG/configs/$P.yaml" --hardware h100-sxm-hf --gpus 8 --json "$WORK/p.json" > /dev/null 2>&1
direct=$(sed -n 's/.*"step_time": \([0-9.e+-]*\).*/\1/p' "$WORK/p.json")
check "step time = loom sim on the point's config" close_to "$(csv_row "$CSV" name $P avg_iter_time_s)" "$direct" 1e-9
check "MFU = loom sim's" close_to "$(csv_row "$CSV" name $P mfu_percent)" \
  "$(sed -n 's/.*"mfu": \([0-9.e+-]*\).*/\1/p' "$WORK/p.json" | awk '{ printf "%.9g", 100 * $1 }')" 1e-3
check "iterations/s = 1 / step time" close_to "$(csv_row "$CSV" name $P iters_per_s)" \
  "$(awk -v t="$direct" 'BEGIN { printf "%.12g", 1 / t }')" 1e-6
check "the run directory keeps config.yaml and summary.json" test -f "$LOG/sim/$P/config.yaml" -a -f "$LOG/sim/$P/summary.json"

# ---- another profile from the command line: the file's sim: {hardware} is replaced ----------
"$LOOM" sweep "$GRID" --launcher sim --hardware h200 --log-dir "$WORK/logs_h200" > "$WORK/h200.txt" 2>&1
check "loom sweep FILE --hardware h200 exits 0" test $? = 0
H=$(ls -d "$WORK"/logs_h200/sweep_*)
check "summary names h200" grep -q '^launcher: sim, hardware h200$' "$H/summary.txt"
check "h200's usable memory in the simulation" close_to "$(hw_limit h200)" \
  "$(sed -n 's/.*"mem_limit": \([0-9.e+]*\).*/\1/p' "$H/sim/qwen2.5-vl-7b_tp4_vsp4_vtp1_img448_bs1/sim.json" | awk '{ printf "%.9g", $1 / 1073741824 }')" 1e-4
check "fewer OOM points with more memory" test "$(grep -c ',OOM,' "$H/summary.csv")" -lt "$(grep -c ',OOM,' "$CSV")"

# ---- bad input ---------------------------------------------------------------------------------
"$LOOM" sweep run "$GRID" --launcher sim --hardware h900 --log-dir "$WORK/logs_bad" > "$WORK/bad.txt" 2>&1
check "unknown hardware: exit 2" test $? = 2
check "unknown hardware: the message names it and the shipped ones" \
  grep -q "unknown hardware profile 'h900'.*h100-sxm" "$WORK/bad.txt"
check "unknown hardware: nothing written" test ! -e "$WORK/logs_bad"
"$LOOM" sweep run "$GRID" --launcher local --hardware h200 --log-dir "$WORK/logs_bad" > "$WORK/bad.txt" 2>&1
check "--hardware with the local launcher: exit 2" test $? = 2
check "--hardware with the local launcher: says only sim takes it" grep -q "only --launcher sim" "$WORK/bad.txt"
cat > "$WORK/layouts.yaml" <<'YAML'
name: layouts
overrides: [model.preset=qwen2.5-vl-7b, training.seq_len=512, data.image_max_pixels=200704, training.dtype=bf16]
parameters:
  parallel.tp: [4, 3]
  vision.parallel.sp: [0, 2]
name_keys: [parallel.tp, vision.parallel.sp]
YAML
"$LOOM" sweep run "$WORK/layouts.yaml" --launcher sim --log-dir "$WORK/logs_layout" > "$WORK/layout.txt" 2>&1
check "a failed point: exit 1" test $? = 1
L=$(ls -d "$WORK"/logs_layout/sweep_*)
check "tp 4, vision following the text: SUCCESS" test "$(csv_row "$L/summary.csv" name qwen2.5-vl-7b_tp4_vsp0 status)" = SUCCESS
check "tp 3 (28 heads): FAILED" test "$(csv_row "$L/summary.csv" name qwen2.5-vl-7b_tp3_vsp0 status)" = FAILED
check "tp 3: the reason in the summary" grep -q "note: simulator: parallel.tp (3) must divide model.heads (28)" "$L/summary.txt"
check "vision sp 2 over tp 4: FAILED" test "$(csv_row "$L/summary.csv" name qwen2.5-vl-7b_tp4_vsp2 status)" = FAILED
check "vision sp 2 over tp 4: the reason names the keys" \
  grep -q "note: simulator: vision.parallel.tp=0 vision.parallel.sp=2 with parallel.tp=4 .*set vision.parallel.sp=4" "$L/summary.txt"
check "the failure is on the runner's line" grep -q 'FAILED *qwen2.5-vl-7b_tp3_vsp0 .*must divide model.heads' "$WORK/layout.txt"
"$LOOM" sim model.preset=qwen2.5-vl-7b parallel.sp=4 --hardware h100-sxm > "$WORK/sp.txt" 2>&1
check "loom sim: text Ulysses sp with the encoder following it is refused, naming the keys" \
  grep -q "vision.parallel.tp=0 vision.parallel.sp=0 (follow the text) with parallel.tp=1 parallel.sp=4.*set vision.parallel.tp=1 vision.parallel.sp=1" "$WORK/sp.txt"
"$LOOM" sweep run "$GRID" --launcher sim --dry-run --log-dir "$WORK/logs_dry" > "$WORK/dry.txt" 2>&1
check "--dry-run: exit 0" test $? = 0
check "--dry-run: the loom sim command of every point" \
  test "$(grep -c 'DRY-RUN .*loom sim .*/configs/qwen2.5-vl-7b_.*\.yaml --hardware h100-sxm-hf --gpus 4$' "$WORK/dry.txt")" = 48
check "--dry-run: nothing simulated" test ! -e "$(ls -d "$WORK"/logs_dry/sweep_*)/sim"
grep '^qwen2.5-vl-' "$L/summary.txt" > "$WORK/rows1"
"$LOOM" sweep summary "$L" > /dev/null
check "loom sweep summary rebuilds the same rows from state.tsv" \
  bash -c "grep '^qwen2.5-vl-' '$L/summary.txt' | diff -q - '$WORK/rows1' > /dev/null"
finish
