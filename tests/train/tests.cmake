# End-to-end tests of `loom train` through the real executable (vqa_learns_test: the
# synthetic VQA demo learns, against the majority baseline and a blank-image control).
set(LOOM_TRAIN_SCRIPT_TESTS resume_test bad_input_test init_from_bad_input_test
    resume_safety_test disk_full_test mfu_test lineage_test mfu_summary_test)
# The learning test trains for ~1 minute in the Release build; under the sanitizers (Debug,
# ~20x slower) it cannot finish, and it checks learning, not memory: the sanitizer suite runs
# the same training code through the other tests.
if(NOT LOOM_SANITIZE)
  list(APPEND LOOM_TRAIN_SCRIPT_TESTS vqa_learns_test)
endif()
foreach(t ${LOOM_TRAIN_SCRIPT_TESTS})
  add_test(NAME train_${t} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/train/${t}.sh $<TARGET_FILE:loom>)
  set_tests_properties(train_${t} PROPERTIES TIMEOUT 300
    ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive")
endforeach()
# lineage_test forks a run into a 2-rank layout (mpirun: Open MPI's start-up allocations are
# reported as leaks by LeakSanitizer in the sanitizer build)
# vqa_learns_test trains twice for 1500 steps: ~2.5 minutes on an idle 2-core machine, up to
# 5 beside the rest of `ctest -j 2` (it ran past 300 s once in CI, all its checks passed)
if(NOT LOOM_SANITIZE)
  set_tests_properties(train_vqa_learns_test PROPERTIES TIMEOUT 900)
endif()
set_tests_properties(train_lineage_test PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ASAN_OPTIONS=detect_leaks=0")
# Validation loss in training and `loom eval` (eval_test.sh starts 2-rank runs with mpirun,
# whose start-up allocations LeakSanitizer would report).
add_test(NAME train_eval_test COMMAND bash ${CMAKE_SOURCE_DIR}/tests/train/eval_test.sh $<TARGET_FILE:loom>)
set_tests_properties(train_eval_test PROPERTIES TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ASAN_OPTIONS=detect_leaks=0")
# `loom eval` of HF-exported models against the same loss computed by PyTorch (and 2-rank
# tensor / pipeline parallel evaluations against it).
add_test(NAME train_eval_torch_check
  COMMAND ${LOOM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/train/eval_torch_check.py $<TARGET_FILE:loom>)
set_tests_properties(train_eval_torch_check PROPERTIES TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ASAN_OPTIONS=detect_leaks=0")
# the full-disk test mounts a tmpfs: without root it exits 77 and counts as skipped
set_tests_properties(train_disk_full_test PROPERTIES SKIP_RETURN_CODE 77)
# The precision policy (training.param_dtype / optim_dtype): layouts vs one process, dtypes of
# the checkpoint files, bitwise resume, memory lines, BF16 export, refused combinations.
add_test(NAME train_precision_test
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/train/precision_test.sh $<TARGET_FILE:loom>)
set_tests_properties(train_precision_test PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ASAN_OPTIONS=detect_leaks=0")
# Every parallel layout against one process (tests/train/parallel_*_test.sh, under mpirun
# --oversubscribe): the strategies and their combinations, resharding resume, global batch,
# packed documents, failure paths and the kill -9 campaign, long-context memory, expert parallelism.
set(LOOM_PARALLEL_SCRIPT_TESTS equivalence_test cp_equivalence_test vlm_equivalence_test
    ulysses_tp_test reshard_test failure_test init_from_test global_batch_test crash_test
    packed_test ep_test)
# cp_long_test measures memory under a 256 MB per-process limit (RLIMIT_DATA): the sanitizers'
# shadow memory cannot live under it, so the sanitizer build does not run it
if(NOT LOOM_SANITIZE)
  list(APPEND LOOM_PARALLEL_SCRIPT_TESTS cp_long_test)
endif()
foreach(t ${LOOM_PARALLEL_SCRIPT_TESTS})
  add_test(NAME train_parallel_${t} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/train/parallel_${t}.sh
           $<TARGET_FILE:loom> $<TARGET_FILE:model_vision_split_check>)
  # Open MPI's own start-up allocations are reported as leaks by LeakSanitizer
  set_tests_properties(train_parallel_${t} PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
endforeach()
# Signals and preemption (SIGINT, SIGTERM, SIGUSR1; one process, --nproc, raw mpirun, a second
# signal, a closed pipe): under mpirun, whose start-up allocations LeakSanitizer would report.
add_test(NAME train_signal_test
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/train/signal_test.sh $<TARGET_FILE:loom>)
set_tests_properties(train_signal_test PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ASAN_OPTIONS=detect_leaks=0")
# training.skip_steps: equal to the run on the token shard cut to lack those batches
# (skip_steps_cut.py), the learning rate, resume (one process bitwise, dp=2 under --nproc),
# bad ranges named.
add_test(NAME train_skip_steps_test
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/train/skip_steps_test.sh $<TARGET_FILE:loom>)
set_tests_properties(train_skip_steps_test PROPERTIES TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ASAN_OPTIONS=detect_leaks=0")
# data.tokenizer checked at the start of training (missing, directory, truncated, too large,
# not the shards'), the same messages as loom generate's (mpirun for the 2-rank case).
add_test(NAME train_tokenizer_check_test
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/train/tokenizer_check_test.sh $<TARGET_FILE:loom>)
set_tests_properties(train_tokenizer_check_test PROPERTIES TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ASAN_OPTIONS=detect_leaks=0")
