# The one "run loom and capture" helper of the shell tests (sources assert.sh). Set $LOOM (the
# executable) and $WORK (a scratch directory) first.
#   run_loom ARGS...   runs "$LOOM" ARGS; run_cmd CMD ARGS... runs any command. Both keep the
#                      command line in RUN_CMD, the exit status in RUN_RC, stdout and stderr in
#                      RUN_OUT / RUN_ERR and in the files $RUN_DIR/out and $RUN_DIR/err.
#   run_show           prints the last command, its exit status and what it printed (stderr).
#   expect_rc WHAT N, expect_out WHAT TEXT, expect_err WHAT TEXT: assertions on the last run;
#   expect_fail WHAT TEXT CMD...: CMD exits non-zero and its stderr holds TEXT (the line
#                      holding it is printed).
# A failing assertion prints the command and its output, so a log says what loom answered.
[ -n "${LOOM_ASSERT_LOADED:-}" ] || . "$(dirname "${BASH_SOURCE[0]}")/assert.sh"
LOOM_ASSERT_LOADED=1
RUN_DIR=${WORK:?set WORK before sourcing tests/loom.sh}/.run_loom
RUN_CMD='' RUN_RC=0 RUN_OUT='' RUN_ERR=''

run_cmd() {
  mkdir -p "$RUN_DIR"
  RUN_CMD=$(printf '%q ' "$@")
  "$@" >"$RUN_DIR/out" 2>"$RUN_DIR/err"
  RUN_RC=$?
  RUN_OUT=$(cat "$RUN_DIR/out") RUN_ERR=$(cat "$RUN_DIR/err")
  return $RUN_RC
}
run_loom() { run_cmd "$LOOM" "$@"; }

run_show() {
  {
    echo "  command: $RUN_CMD"
    echo "  exit status: $RUN_RC"
    echo "  stdout (first 20 lines):"; head -20 "$RUN_DIR/out" 2>/dev/null | sed 's/^/    /'
    echo "  stderr (first 20 lines):"; head -20 "$RUN_DIR/err" 2>/dev/null | sed 's/^/    /'
  } >&2
}

expect_rc() { # what, status
  if [ "$RUN_RC" = "$2" ]; then pass; else fail "$1: exit status $RUN_RC, expected $2"; run_show; fi
}
expect_out() { # what, text stdout must hold
  if [[ "$RUN_OUT" == *"$2"* ]]; then pass; else fail "$1: stdout lacks '$2'"; run_show; fi
}
expect_err() { # what, text stderr must hold
  if [[ "$RUN_ERR" == *"$2"* ]]; then pass; else fail "$1: stderr lacks '$2'"; run_show; fi
}
expect_fail() { # what, text stderr must hold, command...
  local what=$1 want=$2; shift 2
  run_cmd "$@"
  if [ "$RUN_RC" -eq 0 ]; then fail "$what: exit code 0"; run_show
  elif [[ "$RUN_ERR" != *"$want"* ]]; then fail "$what: message lacks '$want': $RUN_ERR"; run_show
  else pass; echo "  $what: $(grep -m1 -F -- "$want" <<<"$RUN_ERR" | cut -c1-200)"; fi
}
