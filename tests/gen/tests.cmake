# Generation (`loom generate`): greedy ids against an independent PyTorch greedy decode of
# the same (exported or Hugging Face) weights, batched prompts, max_seq; the VLM answer
# about an image against the training-time evaluation path; bad input.
add_test(NAME gen_torch_greedy
  COMMAND ${LOOM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/gen_torch_check.py $<TARGET_FILE:loom>)
set_tests_properties(gen_torch_greedy PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
