# Checkpoint (safetensors) script tests: tests/ckpt/st_check.py checks loom's reader and
# writer against an independent numpy/torch implementation of the format, driving the
# `loom` binary and the st_helper executable below (st_helper is a tool, not a test).
add_executable(ckpt_st_helper ${CMAKE_CURRENT_LIST_DIR}/st_helper.c)
target_link_libraries(ckpt_st_helper PRIVATE loomlib)
add_test(NAME ckpt_st_python
  COMMAND ${LOOM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/st_check.py $<TARGET_FILE:loom>
          $<TARGET_FILE:ckpt_st_helper>)
set_tests_properties(ckpt_st_python PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 120)

# Hugging Face export/import: tests/ckpt/hf_check.py compares HF-style PyTorch forwards on
# exported files (and on files it writes for import) with loom's logits from ckpt_hf_helper.
add_executable(ckpt_hf_helper ${CMAKE_CURRENT_LIST_DIR}/hf_helper.c)
target_link_libraries(ckpt_hf_helper PRIVATE loomlib)
add_test(NAME ckpt_hf_python
  COMMAND ${LOOM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/hf_check.py $<TARGET_FILE:loom>
          $<TARGET_FILE:ckpt_hf_helper>)
set_tests_properties(ckpt_hf_python PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1" TIMEOUT 120)
# ... and on checkpoints written by `loom train` (one process; tensor-parallel under mpirun).
add_test(NAME ckpt_hf_train
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/hf_train_test.sh $<TARGET_FILE:loom>
          $<TARGET_FILE:ckpt_hf_helper>)
set_tests_properties(ckpt_hf_train PROPERTIES TIMEOUT 180)
# ... and vision-language checkpoints written by `loom train` (one process, 2 ranks, LLaVA).
add_test(NAME ckpt_hf_vlm_train
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/hf_vlm_train_test.sh $<TARGET_FILE:loom>)
# 2- and 4-rank layouts under mpirun: Open MPI's start-up allocations are reported as leaks by
# LeakSanitizer in the sanitizer build
set_tests_properties(ckpt_hf_vlm_train PROPERTIES TIMEOUT 300
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
# `loom ckpt inspect`'s global view of checkpoints written by one process and by tp/ZeRO-3/pp
# ranks (the same tensors), and every checkpoint reader on a checkpoint whose COMPLETE marker
# lists a missing or resized file (exit 1, the file named, the checkpoint to use instead).
add_test(NAME ckpt_inspect
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/ckpt_inspect_test.sh $<TARGET_FILE:loom>)
set_tests_properties(ckpt_inspect PROPERTIES TIMEOUT 300 ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
# Qwen3 / Qwen3-MoE / Qwen2-MoE / Mixtral: tests/ckpt/hf_moe_check.py checks the exported
# tensor names and shapes against transformers' module structure, the transformers-v5 fused
# expert layout on import, and the import of an HF directory it writes (bitwise throughout).
add_test(NAME ckpt_hf_moe_python
  COMMAND ${LOOM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/hf_moe_check.py $<TARGET_FILE:loom>
          $<TARGET_FILE:ckpt_hf_helper>)
set_tests_properties(ckpt_hf_moe_python PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 120)
# ... and their logits: tests/ckpt/hf_moe_logits.py runs float64 forwards written from
# transformers' modeling files (hf_models_moe.py) on exported random and trained checkpoints
# and compares them with loom's fp32 logits (tolerance and tie guard in its docstring).
add_test(NAME ckpt_hf_moe_logits
  COMMAND ${LOOM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/hf_moe_logits.py $<TARGET_FILE:loom>
          $<TARGET_FILE:ckpt_hf_helper>)
set_tests_properties(ckpt_hf_moe_logits PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1" TIMEOUT 180)
# checkpoint.init_from=HF_DIR without model keys: the directory's model (dense and MoE), the
# model keys a run sets laid over it, contradicting ones refused naming both values.
add_test(NAME ckpt_hf_init_from
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/hf_init_from_test.sh $<TARGET_FILE:loom>
          $<TARGET_FILE:ckpt_hf_helper>)
set_tests_properties(ckpt_hf_init_from PROPERTIES TIMEOUT 300)
