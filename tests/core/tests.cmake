# Core tests: test_memory.c (every tests/*/test_*.c is registered by tests/tests.cmake) checks
# the checked-allocation helpers in forked children; oom_test.sh makes loom's own large
# allocations fail in `loom train`, `loom eval`, `loom ckpt import` and a 2-rank job under
# `ulimit -d` and checks the message, the exit status and that nothing is left half-written.
# The sanitizers' shadow memory cannot live under ulimit -d (ASan reserves terabytes of address
# space), so the sanitizer build does not run it (test_memory covers the helpers there).
if(NOT LOOM_SANITIZE)
  add_test(NAME core_oom_test
    COMMAND bash ${CMAKE_SOURCE_DIR}/tests/core/oom_test.sh $<TARGET_FILE:loom>)
  set_tests_properties(core_oom_test PROPERTIES TIMEOUT 300
    ENVIRONMENT
    "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;LOOM_PYTHON=${LOOM_PYTHON}")
endif()
