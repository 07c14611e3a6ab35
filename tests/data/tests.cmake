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

# Vision-language preprocessing against Python reimplementations of Qwen2-VL's image
# processor (PIL bicubic, normalise, patch order) and get_rope_index (numpy/torch/PIL).
add_executable(vqa_dump ${CMAKE_SOURCE_DIR}/tests/data/vqa_dump.c)
target_link_libraries(vqa_dump PRIVATE loomlib PkgConfig::JANSSON)
add_test(NAME data_vqa_python
  COMMAND ${LOOM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/data/vqa_check.py $<TARGET_FILE:loom>
          $<TARGET_FILE:vqa_dump> ${CMAKE_BINARY_DIR}/data_vqa_python)
set_tests_properties(data_vqa_python PROPERTIES TIMEOUT 120)

# Pre-tokenizer split against Python's `regex` module (the GPT-2 reference) on every Unicode
# whitespace / separator code point and a sample of every general category, for the GPT-2
# and Qwen2 patterns (tests/data/pretok_check.py; needs python3-regex).
add_executable(pretok_dump ${CMAKE_SOURCE_DIR}/tests/data/pretok_dump.c)
target_link_libraries(pretok_dump PRIVATE loomlib)
add_test(NAME data_pretok_python
  COMMAND ${LOOM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/data/pretok_check.py $<TARGET_FILE:pretok_dump>)
set_tests_properties(data_pretok_python PROPERTIES TIMEOUT 300)
# ... and the GPT-2 token ids of the whitespace/separator texts against OpenAI's encoder.py
# algorithm on GPT-2's real tokenizer.json (built by data_node_setup).
add_test(NAME data_pretok_gpt2_ids
  COMMAND ${LOOM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/data/pretok_check.py $<TARGET_FILE:pretok_dump>
          ${LOOM_DATA_NODE_WORK}/gpt2.json)
set_tests_properties(data_pretok_gpt2_ids PROPERTIES FIXTURES_REQUIRED data_node TIMEOUT 300)

# `loom data tokenize` / `train-tokenizer` through the binary: the same bytes on 1, 2 and 4
# threads, JSON Lines and gzip/zstd inputs, shards with a manifest that training reads to the
# same losses, progress lines, and every refused input (tests/data/tokenize_test.sh).
add_test(NAME data_tokenize_cli
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/tokenize_test.sh $<TARGET_FILE:loom>)
set_tests_properties(data_tokenize_cli PROPERTIES TIMEOUT 300)
