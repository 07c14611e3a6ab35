# Script tests of the data area: loom's tokenizer against the JavaScript implementations
# (@huggingface/tokenizers, js-tiktoken) on GPT-2's tokenizer.json, a Qwen2-style one and one
# trained by `loom data train-tokenizer`. They need node + npm; data_node_setup runs `npm ci`
# in tests/node when needed and builds the tokenizer files under <build>/data_node.
set(LOOM_DATA_NODE_WORK ${CMAKE_BINARY_DIR}/data_node)
set(LOOM_DATA_NODE_SCRIPT ${CMAKE_SOURCE_DIR}/tests/node/run_crosscheck.sh)
add_test(NAME data_node_setup
  COMMAND bash ${LOOM_DATA_NODE_SCRIPT} setup $<TARGET_FILE:loom> ${LOOM_DATA_NODE_WORK})
set_tests_properties(data_node_setup PROPERTIES FIXTURES_SETUP data_node TIMEOUT 300)
foreach(mode gpt2 qwen2 trained)
  add_test(NAME data_node_${mode}
    COMMAND bash ${LOOM_DATA_NODE_SCRIPT} ${mode} $<TARGET_FILE:loom> ${LOOM_DATA_NODE_WORK})
  set_tests_properties(data_node_${mode} PROPERTIES FIXTURES_REQUIRED data_node TIMEOUT 120)
endforeach()
