# Simulator script tests: `loom sim` replays the same instruction order as `loom train` on the
# same schedule text, and counts the same bytes per collective as the trainer's comm.json.
add_test(NAME sim_vs_train COMMAND ${LOOM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/sim/sim_vs_train_test.py $<TARGET_FILE:loom>)
set_tests_properties(sim_vs_train PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE
  ENVIRONMENT "LOOM_SOURCE_DIR=${CMAKE_SOURCE_DIR};ASAN_OPTIONS=detect_leaks=0")
# Context parallelism and Ulysses x TP: instruction order, bytes per collective (= comm.json =
# closed forms) on 2-4 ranks. Nothing timed: the step times are bench/sim_vs_train.sh's.
add_test(NAME sim_vs_train_cp COMMAND ${LOOM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/sim/sim_vs_train_cp_test.py $<TARGET_FILE:loom>)
set_tests_properties(sim_vs_train_cp PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE
  ENVIRONMENT "LOOM_SOURCE_DIR=${CMAKE_SOURCE_DIR};ASAN_OPTIONS=detect_leaks=0")
# `loom bench --nproc N`: the devices measured on every rank with a core at once, the slowest
# rank's profile kept
add_test(NAME sim_bench_ranks COMMAND bash ${CMAKE_SOURCE_DIR}/tests/sim/bench_ranks_test.sh $<TARGET_FILE:loom>)
set_tests_properties(sim_bench_ranks PROPERTIES TIMEOUT 300 ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
# The measuring ranks time in lockstep: scripted times on 2 ranks that trade places as the slow
# one; both keep the fastest pass of the slower rank's times, and run the same passes.
loom_mpi_executable(sim_bench_lockstep_check ${CMAKE_CURRENT_LIST_DIR}/bench_lockstep_check.c)
loom_mpi_test(sim_bench_lockstep sim_bench_lockstep_check 2 120)
# MFU against the instruction peak end to end: `loom bench --only peak` writes it, `loom train`
# takes the figure of its dtype and threads and names it (train.log, summary.json); without the
# key the library's figure, named as such. Nothing timed is asserted.
add_test(NAME sim_mfu_instruction_peak COMMAND bash ${CMAKE_SOURCE_DIR}/tests/sim/mfu_instruction_peak_test.sh $<TARGET_FILE:loom>)
set_tests_properties(sim_mfu_instruction_peak PROPERTIES TIMEOUT 300
  ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ASAN_OPTIONS=detect_leaks=0")
# `loom bench model --roofline`: the compute parts against the instruction peak of the profile
# (named, the library's GEMM beside it), the library's GEMM peak without one (~1 minute: the
# GEMM peaks are measured twice)
add_test(NAME sim_roofline_instruction_peak COMMAND bash ${CMAKE_SOURCE_DIR}/tests/sim/roofline_instruction_peak_test.sh $<TARGET_FILE:loom>)
set_tests_properties(sim_roofline_instruction_peak PROPERTIES TIMEOUT 300
  ENVIRONMENT "OPENBLAS_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
# bench/sim_vs_train.sh in rounds: the table's row and the kept steps agree, refusals (~40 s: two
# calibrations). Nothing timed is asserted.
add_test(NAME sim_bench_rounds COMMAND bash ${CMAKE_SOURCE_DIR}/tests/sim/bench_rounds_test.sh $<TARGET_FILE:loom>)
set_tests_properties(sim_bench_rounds PROPERTIES TIMEOUT 300 ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
