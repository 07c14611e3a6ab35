# Script tests of the run registry through the loom executable (tests/experiments.sh helpers):
#   registry_crash_test  a run killed with SIGKILL shows as crashed
#   registry_cli_test    runs filters (AND), exact names, pasted commands, crashed progress,
#                        missing directories, runs delete/gc, did you mean, loom help
add_test(NAME registry_crash_test COMMAND bash ${CMAKE_SOURCE_DIR}/tests/registry/crash_test.sh $<TARGET_FILE:loom>)
add_test(NAME registry_cli_test COMMAND bash ${CMAKE_SOURCE_DIR}/tests/registry/registry_cli_test.sh $<TARGET_FILE:loom>)
set_tests_properties(registry_crash_test registry_cli_test PROPERTIES TIMEOUT 120
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive")
# registry_records_test: summary.json and the registry agree (status, steps and losses from
# metrics.jsonl) after a rank killed by signal 9, a rank's own error, --stop-after and the
# resume to the end, all under `loom train --nproc 2` (mpirun: no LeakSanitizer)
add_test(NAME registry_records_test
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/registry/records_test.sh $<TARGET_FILE:loom>)
set_tests_properties(registry_records_test PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ASAN_OPTIONS=detect_leaks=0")
