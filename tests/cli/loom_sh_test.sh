#!/usr/bin/env bash
# tests/loom.sh, the shell tests' "run loom and capture" helper, on loom itself: run_loom keeps
# exit status, stdout and stderr apart (variables and files); each expect_* passes and fails
# when it should (a failure counted and the command with its output printed); expect_fail
# refuses exit 0 and a message without the text.
set -u
LOOM=$(realpath "${1:?usage: $0 path/to/loom}")
WORK=$(mktemp -d /tmp/loom-sh-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "$0")/../loom.sh"
# the assertions under test run in a subshell with their own counters: "PASSED FAILED"
counts() { ( PASSED=0 FAILED=0; "$@" >/dev/null 2>"$WORK/shown"; echo "$PASSED $FAILED" ) }

run_loom version
check "run_loom: exit status 0" test "$RUN_RC" = 0
check "run_loom: stdout in RUN_OUT" test "$RUN_OUT" = "$("$LOOM" version)"
check "run_loom: stderr empty" test -z "$RUN_ERR" -a ! -s "$RUN_DIR/err"
check "run_loom: stdout in \$RUN_DIR/out" test "$(cat "$RUN_DIR/out")" = "$RUN_OUT"
run_loom train --bogus
check "run_loom: exit status 2 of a usage error" test "$RUN_RC" = 2
check "run_loom: the message in RUN_ERR, not RUN_OUT" test -z "$RUN_OUT" -a -n "$RUN_ERR"
check "run_loom: RUN_CMD names the command" grep -q -- "train --bogus" <<<"$RUN_CMD"
check "run_loom returns the command's status" test "$(run_loom train --bogus; echo $?)" = 2

check "expect_rc: pass" test "$(counts expect_rc x 2)" = "1 0"
check "expect_rc: fail" test "$(counts expect_rc x 0)" = "0 1"
check "a failed expect_rc prints the command and its stderr" grep -q "unknown option '--bogus'" "$WORK/shown"
check "expect_err: pass" test "$(counts expect_err x "unknown option '--bogus'")" = "1 0"
check "expect_err: fail" test "$(counts expect_err x "no such text")" = "0 1"
check "expect_out: fail (the message is on stderr)" test "$(counts expect_out x "unknown option")" = "0 1"
check "expect_fail: pass" test "$(counts expect_fail x "did you mean '--resume'" "$LOOM" train --resme)" = "1 0"
check "expect_fail: exit 0 fails" test "$(counts expect_fail x "" "$LOOM" version)" = "0 1"
check "expect_fail: wrong text fails" test "$(counts expect_fail x "no such text" "$LOOM" train --bogus)" = "0 1"
finish
