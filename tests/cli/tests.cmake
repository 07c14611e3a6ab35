# The command line as a whole: every command and subcommand `loom help` lists answers --help
# (naming each option its parser accepts), rejects --bogus naming it, suggests the nearest
# option for a misspelt one and names an option given without its value.
add_test(NAME cli_options_walk COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/options_walk_test.sh $<TARGET_FILE:loom>)
set_tests_properties(cli_options_walk PROPERTIES TIMEOUT 300)
# tests/loom.sh (run_loom and its assertions) on loom itself
add_test(NAME cli_loom_sh COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/loom_sh_test.sh $<TARGET_FILE:loom>)
set_tests_properties(cli_loom_sh PROPERTIES TIMEOUT 60)
# The commands on the one option parser, as a user meets them: each takes its own options and
# refuses others' with a suggestion; runs' subcommand among its options; sweep run's flag and
# its opposite; the commands with subcommands (help, nothing, unknown, an option there)
add_test(NAME cli_commands COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/commands_test.sh $<TARGET_FILE:loom>)
set_tests_properties(cli_commands PROPERTIES TIMEOUT 120)
