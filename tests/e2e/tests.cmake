# End-to-end: the whole user path through the `loom` executable (data -> tokenizer -> train
# with validation -> HF export -> import -> 4-rank init_from fine-tune -> loom eval ->
# loom generate = PyTorch greedy -> a VLM answering about an image), and bad input along it.
# 4-rank runs are started with mpirun, whose start-up allocations LeakSanitizer would report.
set(LOOM_E2E_ENV "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ASAN_OPTIONS=detect_leaks=0;LOOM_PYTHON=${LOOM_PYTHON}")
# The VLM must learn to answer (300 steps): too slow under the sanitizers (~20x), like
# train_vqa_learns_test; the sanitizer suite runs the same code through the other tests.
if(NOT LOOM_SANITIZE)
  add_test(NAME e2e_user_path
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/user_path_test.sh $<TARGET_FILE:loom> $<TARGET_FILE:gen_vqa_helper>)
  set_tests_properties(e2e_user_path PROPERTIES TIMEOUT 400 ENVIRONMENT "${LOOM_E2E_ENV}")
endif()
add_test(NAME e2e_bad_input COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/bad_input_test.sh $<TARGET_FILE:loom>)
set_tests_properties(e2e_bad_input PROPERTIES TIMEOUT 300 ENVIRONMENT "${LOOM_E2E_ENV}")
# The experiment walk-through (issue 13): groups and +keys, -m, grid and random sweeps, a
# killed, a resumed and a forked run, loom runs filters/sort/show/hide/limit, runs diff of TP
# vs DP (0) and of two lrs (1), the dashboard in headless Chromium (screenshot kept here).
add_test(NAME e2e_experiment_walkthrough
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/experiment_walkthrough_test.sh $<TARGET_FILE:loom>
          ${CMAKE_BINARY_DIR}/experiment_walkthrough_screenshot.png)
set_tests_properties(e2e_experiment_walkthrough PROPERTIES TIMEOUT 300 ENVIRONMENT "${LOOM_E2E_ENV}")
# docs/ARCHITECTURE.md against the tree: every folder and public header named, the layer
# diagram, no include of a header from a folder above or of another folder's private header.
add_test(NAME e2e_architecture
  COMMAND ${LOOM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/architecture_test.py ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e_architecture PROPERTIES TIMEOUT 60)
# Docs that run: every `loom ...` command of README.md and docs/*.md run on small demo data
# (placeholders filled, sizes cut; skipped ones named with their reason, never passed), usage
# synopses checked against the parsers' options.
add_test(NAME e2e_docs_commands
  COMMAND ${LOOM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/docs_commands_test.py $<TARGET_FILE:loom> ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e_docs_commands PROPERTIES TIMEOUT 600 ENVIRONMENT "${LOOM_E2E_ENV}")
# loom eval / generate of multi-rank checkpoints (tp=2, pp=2, dp=2 ZeRO-1) in one process: the
# val loss of their own layout; runs/<id> stands for its final (or newest complete) checkpoint.
add_test(NAME e2e_eval_any_layout
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/eval_any_layout_test.sh $<TARGET_FILE:loom>)
set_tests_properties(e2e_eval_any_layout PROPERTIES TIMEOUT 300 ENVIRONMENT "${LOOM_E2E_ENV}")
