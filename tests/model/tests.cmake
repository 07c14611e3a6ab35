# The vision encoder split over its own ranks (tp, Ulysses) against the whole encoder; run
# under mpirun by tests/train/parallel_vlm_equivalence_test.sh (a tool, not a test by itself).
add_executable(model_vision_split_check ${CMAKE_CURRENT_LIST_DIR}/vision_split_check.c)
target_link_libraries(model_vision_split_check PRIVATE loomlib)
# Mixture-of-Experts and Qwen3 models through `loom train` and `loom generate`: data
# parallelism (ZeRO 1-3) equals one process, recompute, resume with bias balancing bitwise, the
# refused layouts, dense Qwen3 in every layout, greedy generation on an MoE checkpoint.
add_test(NAME model_moe_train_test
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/moe_train_test.sh $<TARGET_FILE:loom>)
# Open MPI's own start-up allocations are reported as leaks by LeakSanitizer
set_tests_properties(model_moe_train_test PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
