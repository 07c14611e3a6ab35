# Generation (`loom generate`): greedy ids against an independent PyTorch greedy decode of
# the same (exported or Hugging Face) weights, batched prompts, max_seq; the VLM answer
# about an image against the training-time evaluation path; bad input.
add_test(NAME gen_torch_greedy
  COMMAND ${LOOM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/gen_torch_check.py $<TARGET_FILE:loom>)
set_tests_properties(gen_torch_greedy PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1" TIMEOUT 300)

# The tiny VLM: `loom generate --image` answers equal the evaluation path's (gen_vqa_helper,
# a tool, not a test), and bad input (tests/gen/generate_cli_test.sh).
add_executable(gen_vqa_helper ${CMAKE_CURRENT_LIST_DIR}/vqa_eval_helper.c)
target_link_libraries(gen_vqa_helper PRIVATE loomlib)
add_test(NAME gen_vlm_answer
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/vlm_answer_test.sh $<TARGET_FILE:loom>
          $<TARGET_FILE:gen_vqa_helper>)
# gen_vlm_answer trains a VLM to answer (~130 s on an idle 2-core machine; past 300 s beside
# the rest of ctest -j 2 on a loaded one)
set_tests_properties(gen_vlm_answer PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1" TIMEOUT 600)
add_test(NAME gen_cli
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/generate_cli_test.sh $<TARGET_FILE:loom>)
set_tests_properties(gen_cli PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
