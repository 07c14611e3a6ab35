# Fuzz harnesses: every tests/fuzz/fuzz_<target>.c is one LLVMFuzzerTestOneInput.
# - Every build links each with replay_main.c into fuzz_replay_<target> and registers a CTest
#   test that replays tests/fuzz/regress/<target>/ (reproducers of past findings) and
#   tests/fuzz/corpus/<target>/ (seeds): each finding stays fixed, in Release and under ASan.
# - With -DLOOM_FUZZ=ON (clang; `make fuzz`) each also links with libFuzzer as fuzz_<target>.
file(GLOB LOOM_FUZZ_HARNESSES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_*.c)
set(LOOM_FUZZ_TARGETS "")
foreach(src ${LOOM_FUZZ_HARNESSES})
  get_filename_component(name ${src} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" target ${name})
  list(APPEND LOOM_FUZZ_TARGETS ${target})
  add_executable(fuzz_replay_${target} ${src} ${CMAKE_SOURCE_DIR}/tests/fuzz/replay_main.c)
  target_include_directories(fuzz_replay_${target} PRIVATE ${CMAKE_SOURCE_DIR}/tests/fuzz)
  target_link_libraries(fuzz_replay_${target} PRIVATE loomlib)
  add_test(NAME fuzz_replay_${target}
           COMMAND fuzz_replay_${target} ${CMAKE_SOURCE_DIR}/tests/fuzz/regress/${target}
                   ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/${target})
  set_tests_properties(fuzz_replay_${target} PROPERTIES
    ENVIRONMENT "LOOM_SOURCE_DIR=${CMAKE_SOURCE_DIR};OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1"
    TIMEOUT 300)
  if(LOOM_FUZZ)
    add_executable(fuzz_${target} ${src})
    target_include_directories(fuzz_${target} PRIVATE ${CMAKE_SOURCE_DIR}/tests/fuzz)
    target_link_libraries(fuzz_${target} PRIVATE loomlib)
    target_link_options(fuzz_${target} PRIVATE -fsanitize=fuzzer)
  endif()
endforeach()
if(LOOM_FUZZ)
  list(TRANSFORM LOOM_FUZZ_TARGETS PREPEND fuzz_ OUTPUT_VARIABLE LOOM_FUZZ_BINARIES)
  add_custom_target(fuzz_all DEPENDS ${LOOM_FUZZ_BINARIES})
  file(WRITE ${CMAKE_BINARY_DIR}/fuzz_targets.txt "${LOOM_FUZZ_TARGETS}")
endif()
