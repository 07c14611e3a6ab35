# CTest registration. Every tests/<area>/test_*.c becomes one executable and one test,
# run from the build directory with LOOM_BIN pointing at the `loom` executable.
# Areas may add script tests (Python against PyTorch, Node against JS tokenizers) in
# tests/<area>/tests.cmake.
file(GLOB LOOM_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*/test_*.c)
foreach(src ${LOOM_TEST_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE loomlib)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "LOOM_BIN=$<TARGET_FILE:loom>;LOOM_SOURCE_DIR=${CMAKE_SOURCE_DIR};OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive"
    TIMEOUT 600)
endforeach()

# MPI check programs of an area (tests/<area>/tests.cmake): loom_mpi_executable builds one
# against loomlib; loom_mpi_test runs it under mpirun on NP ranks (oversubscribed, unbound, one
# thread a rank, as root where CI is).
function(loom_mpi_executable exe source)
  add_executable(${exe} ${source})
  target_include_directories(${exe} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(${exe} PRIVATE loomlib)
endfunction()
function(loom_mpi_test name exe np timeout)
  add_test(NAME ${name} COMMAND mpirun --oversubscribe --bind-to none -np ${np} $<TARGET_FILE:${exe}>)
  set_tests_properties(${name} PROPERTIES TIMEOUT ${timeout}
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
endfunction()

# Python interpreter with Debian's python3-torch (not a pyenv shim that lacks it).
set(LOOM_PYTHON /usr/bin/python3 CACHE FILEPATH "python3 that has torch and numpy")
file(GLOB LOOM_TEST_AREA_FILES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*/tests.cmake)
foreach(f ${LOOM_TEST_AREA_FILES})
  include(${f})
endforeach()
