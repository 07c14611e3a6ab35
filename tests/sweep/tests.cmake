# Script tests of sweeps through the loom executable (the C tests test_sweep*.c are registered
# by tests/tests.cmake); shared helpers in tests/experiments.sh:
#   sweep_test            grid + random sweeps end to end, registry columns/statuses, summary
#                         numbers vs the runs' metrics, loom runs, plots, grad-norms
#   sweep_multirank_test  the grid's multi-rank points (parallel.dp=2 under mpirun -np 2)
#   sweep_sim_test        seed 000's Qwen2.5-VL grid (configs/sweeps/qwen_vl_grid.yaml) on the
#                         simulator: OOM marking, trends, vision sp vs tp, bad input
#   sweep_vl_real_test    the same sweep file trained for real on a tiny Qwen2.5-VL (command-line
#                         overrides; vision sp vs tp under mpirun -np 2)
#   sweep_env_test        multi-rank sweep points without the root consent in the environment;
#                         failed points' error lines in summary.txt / summary.csv
#   sweep_hydra_test      loom train -m (grid through the sweep runner), +key user keys as
#                         registry columns, run.tags / run.notes
#   sweep_mfu_valid_test  the sweep summary's MFU is each run's own; validation-loss columns
#                         (equal to summary.json and the registry) when the runs had validation
#   sweep_signal_test     a sweep stopped with SIGINT/SIGTERM (a 2-rank point among the running
#                         ones): the points stop with a checkpoint, state.tsv STOPPED/PENDING,
#                         exit 128+sig; --resume (or a rerun) continues them bitwise; a second
#                         signal kills at once
#   sweep_slurm_test      the Slurm launcher against a real slurmctld + slurmd (slurm-wlm, munge)
#                         started by the test; SKIP (exit 77) where they cannot run
foreach(t sweep_test sweep_multirank_test sweep_sim_test sweep_vl_real_test sweep_env_test
    hydra_test sweep_mfu_valid_test)
  string(REGEX REPLACE "^sweep_" "" short ${t})
  add_test(NAME sweep_${short} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/sweep/${t}.sh $<TARGET_FILE:loom>)
  set_tests_properties(sweep_${short} PROPERTIES TIMEOUT 120
    ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive")
endforeach()
add_test(NAME sweep_slurm_test COMMAND bash ${CMAKE_SOURCE_DIR}/tests/sweep/sweep_slurm_test.sh $<TARGET_FILE:loom>)
# its points run under srun and mpirun: Open MPI's start-up allocations are reported as leaks by
# LeakSanitizer in the sanitizer build
set_tests_properties(sweep_slurm_test PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ASAN_OPTIONS=detect_leaks=0")
add_test(NAME sweep_signal_test COMMAND bash ${CMAKE_SOURCE_DIR}/tests/sweep/sweep_signal_test.sh $<TARGET_FILE:loom>)
set_tests_properties(sweep_signal_test PROPERTIES TIMEOUT 180
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ASAN_OPTIONS=detect_leaks=0")
