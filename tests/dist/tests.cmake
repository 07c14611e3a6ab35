# Multi-rank tests under mpirun --oversubscribe: every strategy against the single-process
# run, resharding resume, communication volume, and failure paths.
foreach(t equivalence_test vlm_equivalence_test reshard_test failure_test)
  if(EXISTS ${CMAKE_SOURCE_DIR}/tests/dist/${t}.sh)
    add_test(NAME dist_${t} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/dist/${t}.sh $<TARGET_FILE:loom>)
    # Open MPI's own start-up allocations are reported as leaks by LeakSanitizer
    set_tests_properties(dist_${t} PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE
      ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
  endif()
endforeach()
add_test(NAME dist_comm_volume COMMAND ${LOOM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/dist/comm_volume_test.py $<TARGET_FILE:loom>)
set_tests_properties(dist_comm_volume PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
