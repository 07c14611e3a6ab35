# Assertion helpers of the shell tests: count passes and failures, print the closing
# "N passed, N failed" line, exit non-zero on any failure. To run loom and assert on its exit
# status and output, source tests/loom.sh instead (it sources this file).
PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $*" >&2; }
check() { # check "what" command...
  local what=$1; shift
  if "$@"; then pass; else fail "$what"; fi
}
finish() {
  echo "$(basename "$0"): $PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ]
}
