# Script tests of the kernels area: `loom bench model --roofline` end to end (the profiler's
# own checks are test_roofline.c).
add_test(NAME bench_roofline
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/bench_roofline_test.sh $<TARGET_FILE:loom>)
set_tests_properties(bench_roofline PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;OPENBLAS_NUM_THREADS=1" TIMEOUT 300)

# The AMX GEMM's test exits 77 on CPUs without AMX: CTest reports it skipped, not passed.
set_tests_properties(test_gemm_amx PROPERTIES SKIP_RETURN_CODE 77)
# LOOM_AMX given a value that is not 0 or 1: refused with a clear message (every CPU)
add_test(NAME gemm_amx_env COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/amx_env_test.sh
  $<TARGET_FILE:test_gemm_amx>)
