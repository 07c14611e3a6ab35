# Script tests of experiment management through the loom executable (the C tests
# tests/exp/test_*.c are registered by tests/tests.cmake):
#   exp_sweep            grid + random sweeps end to end, registry columns/statuses, summary
#                        numbers vs the runs' metrics, loom runs, plots, grad-norms, Slurm
#   exp_crash            a run killed with SIGKILL shows as crashed
#   exp_registry_cli     runs filters (AND), exact names, pasted commands, crashed progress,
#                        missing directories, runs delete/gc, did you mean, loom help
#   exp_sweep_multirank  the grid's multi-rank points (parallel.dp=2 under mpirun -np 2)
#   exp_sweep_sim        seed 000's Qwen2.5-VL grid (configs/sweeps/qwen_vl_grid.yaml) on the
#                        simulator: OOM marking, trends, vision sp vs tp, bad input
#   exp_sweep_vl_real    the same sweep file trained for real on a tiny Qwen2.5-VL (command-line
#                        overrides; vision sp vs tp under mpirun -np 2)
#   exp_runs_diff        loom runs diff (tp2/dp2 vs one process: 0, lr: 1, bad input: 2, step
#                        sets, allclose semantics, plot) and loom ckpt compare on the same runs
#   exp_sweep_env        multi-rank sweep points without the root consent in the environment;
#                        failed points' error lines in summary.txt / summary.csv
#   exp_sweep_slurm      the Slurm launcher against a real slurmctld + slurmd (slurm-wlm, munge)
#                        started by the test; SKIP (exit 77) where they cannot run
#   exp_hydra            loom train -m (grid through the sweep runner), +key user keys as
#                        registry columns, run.tags / run.notes
#   exp_sweep_mfu_valid  the sweep summary's MFU is each run's own; validation-loss columns
#                        (equal to summary.json and the registry) when the runs had validation
foreach(t sweep crash sweep_multirank sweep_sim sweep_vl_real runs_diff sweep_env hydra
    registry_cli sweep_mfu_valid)
  add_test(NAME exp_${t} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/exp/${t}_test.sh $<TARGET_FILE:loom>)
  set_tests_properties(exp_${t} PROPERTIES TIMEOUT 120
    ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive")
endforeach()
add_test(NAME exp_sweep_slurm COMMAND bash ${CMAKE_SOURCE_DIR}/tests/exp/sweep_slurm_test.sh $<TARGET_FILE:loom>)
# its points run under srun and mpirun: Open MPI's start-up allocations are reported as leaks by
# LeakSanitizer in the sanitizer build
set_tests_properties(exp_sweep_slurm PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ASAN_OPTIONS=detect_leaks=0")
