# The vision encoder split over its own ranks (tp, Ulysses) against the whole encoder; run
# under mpirun by tests/train/parallel_vlm_equivalence_test.sh (a tool, not a test by itself).
add_executable(model_vision_split_check ${CMAKE_CURRENT_LIST_DIR}/vision_split_check.c)
target_link_libraries(model_vision_split_check PRIVATE loomlib)
