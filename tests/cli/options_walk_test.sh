#!/usr/bin/env bash
# Walks every command and subcommand `loom help` lists: `--help` exits 0 and names every option
# the command's parser accepts (the parser's own table, printed by the hidden --list-options);
# a subcommand's --help is its own usage (its first line names "loom COMMAND SUBCOMMAND");
# `--bogus` exits non-zero with "unknown option '--bogus'" (commands with subcommands too); an option misspelt by one letter gets "did you
# mean" the option; an option that takes a value, given last without one, is refused naming
# it. Leaf commands (subcommands, and commands without subcommands) must list their options.
# Nothing here runs a command's work: every call stops in the parser.
set -u
LOOM=$(realpath "${1:?usage: $0 path/to/loom}")
WORK=$(mktemp -d /tmp/loom-cli-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "$0")/../loom.sh"
cd "$WORK" || exit 1

run_loom help
expect_rc "loom help" 0
help=$RUN_OUT
# "  name   summary" lines of the two sections
commands=$(echo "$help" | sed -n '/^commands:/,/^$/p' | sed -n 's/^  \([a-z-]*\) .*/\1/p')
subcommands=$(echo "$help" | sed -n '/^subcommands:/,/^$/p' | sed -n 's/^  \([a-z-]* [a-z-]*\) .*/\1/p')
check "loom help lists commands ($(echo $commands | wc -w))" test "$(echo $commands | wc -w)" -ge 14
check "loom help lists subcommands ($(echo "$subcommands" | grep -c .))" test "$(echo "$subcommands" | grep -c .)" -ge 30

run_loom --bogus
expect_rc "loom --bogus" 2
expect_err "loom --bogus: an unknown option" "loom: unknown option '--bogus'"

entries=0 options=0
walk() { # entry words...; leaf (1: must have an option table) is $LEAF
  local name="$*" opt bare
  entries=$((entries + 1))
  run_loom "$@" --help
  expect_rc "loom $name --help" 0
  check "loom $name --help prints usage" grep -q "usage" "$RUN_DIR/out"
  check "loom $name --help: nothing on stderr" test ! -s "$RUN_DIR/err"
  local text=$RUN_OUT
  if [ $# = 2 ]; then # "loom runs [list]": the default subcommand
    if grep -qE -- "^usage: loom $1 \[?$2([] ]|$)" <<<"$text"; then pass
    else fail "loom $name --help is not its own usage: $(head -1 <<<"$text")"; fi
  fi
  run_loom "$@" --bogus
  if [ "$RUN_RC" != 0 ] && [[ "$RUN_ERR" == *"unknown option '--bogus'"* ]]; then pass
  else fail "loom $name --bogus: exit $RUN_RC, stderr must say unknown option '--bogus'"; run_show; fi
  run_loom "$@" --list-options
  if [ "$RUN_RC" != 0 ]; then
    if [ "$LEAF" = 1 ]; then fail "loom $name: no option table (--list-options)"; run_show; fi
    return
  fi
  local list=$RUN_OUT
  for opt in $list; do
    bare=${opt%=}
    options=$((options + 1))
    # named in --help as a word of its own: "--out" is not found inside "--output-dir"
    if grep -qE -- "(^|[^A-Za-z0-9-])$bare([^A-Za-z0-9-]|$)" <<<"$text"; then pass
    else fail "loom $name --help does not name $bare (its parser accepts it)"; fi
    [ "$opt" = "$bare" ] && continue
    run_loom "$@" "$bare"
    if [ "$RUN_RC" != 0 ] && [[ "$RUN_ERR" == *"missing value after '$bare'"* ]]; then pass
    else fail "loom $name $bare (no value): must fail naming the option"; run_show; fi
  done
  # did you mean: the first long option with its last letter dropped
  opt=$(echo "$list" | grep -m1 -- '^--' | tr -d =)
  if [ -n "$opt" ]; then
    run_loom "$@" "${opt%?}"
    if [ "$RUN_RC" != 0 ] && [[ "$RUN_ERR" == *"did you mean '$opt'"* ]]; then pass
    else fail "loom $name ${opt%?}: must suggest $opt"; run_show; fi
  fi
}

for c in $commands; do
  LEAF=1
  echo "$subcommands" | grep -q "^$c " && LEAF=0
  walk "$c"
done
while read -r c s; do
  [ -n "$c" ] || continue
  LEAF=1 walk "$c" "$s"
done <<<"$subcommands"
echo "walked $entries commands and subcommands, $options options"
finish
