# The command line as a whole: every command and subcommand `loom help` lists answers --help
# (naming each option its parser accepts), rejects --bogus naming it, suggests the nearest
# option for a misspelt one and names an option given without its value.
add_test(NAME cli_options_walk COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/options_walk_test.sh $<TARGET_FILE:loom>)
set_tests_properties(cli_options_walk PROPERTIES TIMEOUT 300)
# tests/loom.sh (run_loom and its assertions) on loom itself
add_test(NAME cli_loom_sh COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/loom_sh_test.sh $<TARGET_FILE:loom>)
set_tests_properties(cli_loom_sh PROPERTIES TIMEOUT 60)
