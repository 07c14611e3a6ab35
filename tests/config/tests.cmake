# Script tests of the config module through the loom executable (the C tests
# tests/config/test_*.c are registered by tests/tests.cmake):
#   config_groups   defaults lists, _self_, GROUP=OPTION overrides, search path, errors
add_test(NAME config_groups COMMAND bash ${CMAKE_SOURCE_DIR}/tests/config/groups_test.sh $<TARGET_FILE:loom>)
set_tests_properties(config_groups PROPERTIES TIMEOUT 60)
#   config_show     resolved preset values in `loom config show` (every preset, round trip),
#                   "did you mean" for a near-miss preset and for a key given without its section
add_test(NAME config_show COMMAND bash ${CMAKE_SOURCE_DIR}/tests/config/config_show_test.sh $<TARGET_FILE:loom>)
set_tests_properties(config_show PROPERTIES TIMEOUT 120)
