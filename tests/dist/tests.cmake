# Multi-rank tests under mpirun --oversubscribe: every strategy against the single-process
# run, resharding resume, communication volume, and failure paths.
set(LOOM_DIST_SCRIPT_TESTS equivalence_test cp_equivalence_test vlm_equivalence_test
    ulysses_tp_test reshard_test failure_test init_from_test global_batch_test crash_test
    packed_test)
# cp_long_test measures memory under a 256 MB per-process limit (RLIMIT_DATA): the sanitizers'
# shadow memory cannot live under it, so the sanitizer build does not run it
if(NOT LOOM_SANITIZE)
  list(APPEND LOOM_DIST_SCRIPT_TESTS cp_long_test)
endif()
foreach(t ${LOOM_DIST_SCRIPT_TESTS})
  if(EXISTS ${CMAKE_SOURCE_DIR}/tests/dist/${t}.sh)
    add_test(NAME dist_${t} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/dist/${t}.sh $<TARGET_FILE:loom>
             $<TARGET_FILE:dist_vision_split_check>)
    # Open MPI's own start-up allocations are reported as leaks by LeakSanitizer
    set_tests_properties(dist_${t} PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE
      ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
  endif()
endforeach()
add_test(NAME dist_comm_volume COMMAND ${LOOM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/dist/comm_volume_test.py $<TARGET_FILE:loom>)
set_tests_properties(dist_comm_volume PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
# The vision encoder split over its own ranks (tp, Ulysses) against the whole encoder; run
# under mpirun by vlm_equivalence_test.sh (a tool, not a test by itself).
add_executable(dist_vision_split_check ${CMAKE_CURRENT_LIST_DIR}/vision_split_check.c)
target_link_libraries(dist_vision_split_check PRIVATE loomlib)
# Ring attention (context parallelism) on 2, 3 and 4 ranks against the reference attention of
# the whole sequence, with the bytes sent checked against the closed form.
add_executable(dist_ring_attention_check ${CMAKE_CURRENT_LIST_DIR}/ring_attention_check.c)
target_include_directories(dist_ring_attention_check PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(dist_ring_attention_check PRIVATE loomlib)
foreach(np 2 3 4)
  add_test(NAME dist_ring_attention_cp${np} COMMAND mpirun --oversubscribe --bind-to none -np ${np}
           $<TARGET_FILE:dist_ring_attention_check>)
  set_tests_properties(dist_ring_attention_cp${np} PROPERTIES TIMEOUT 300
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
endforeach()
