# Script tests of the run registry through the loom executable (tests/experiments.sh helpers):
#   registry_crash_test  a run killed with SIGKILL shows as crashed
#   registry_cli_test    runs filters (AND), exact names, pasted commands, crashed progress,
#                        missing directories, runs delete/gc, did you mean, loom help
add_test(NAME registry_crash_test COMMAND bash ${CMAKE_SOURCE_DIR}/tests/registry/crash_test.sh $<TARGET_FILE:loom>)
add_test(NAME registry_cli_test COMMAND bash ${CMAKE_SOURCE_DIR}/tests/registry/registry_cli_test.sh $<TARGET_FILE:loom>)
set_tests_properties(registry_crash_test registry_cli_test PROPERTIES TIMEOUT 120
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive")
