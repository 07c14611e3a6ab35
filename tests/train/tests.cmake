# End-to-end tests of `loom train` through the real executable (vqa_learns_test: the
# synthetic VQA demo learns, against the majority baseline and a blank-image control).
foreach(t resume_test bad_input_test vqa_learns_test)
  add_test(NAME train_${t} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/train/${t}.sh $<TARGET_FILE:loom>)
  set_tests_properties(train_${t} PROPERTIES TIMEOUT 300
    ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive")
endforeach()
