/* loom_runs_diff_compute (alignment by step, steps of one run only, duplicates, the allclose
 * criterion with b the reference, NaN and b = 0) and loom_sweep_log_error (which line of a
 * failed point's log is its error) on hand-made inputs whose answers are worked out here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sweep/sweep_internal.h"
#include "harness.h"
#include "loom/runs_diff.h"

static loom_series series(const double *x, const double *y, int n) {
  loom_series s = {malloc(sizeof(double) * (size_t)n), malloc(sizeof(double) * (size_t)n), n};
  memcpy(s.x, x, sizeof(double) * (size_t)n);
  memcpy(s.y, y, sizeof(double) * (size_t)n);
  return s;
}

static void test_align(void) {
  /* A logs steps 3,1,2,5 (out of order) and 2 twice; B logs 1,2,3,4 */
  double ax[] = {3, 1, 2, 5, 2}, ay[] = {3.0, 1.0, 9.0, 5.0, 2.0};
  double bx[] = {1, 2, 3, 4}, by[] = {1.0, 2.0, 3.5, 4.0};
  loom_series a = series(ax, ay, 5), b = series(bx, by, 4);
  loom_runs_diff_tol tol = {0.1, 0};
  loom_runs_diff d;
  loom_runs_diff_compute(&a, &b, &tol, &d);
  CHECK(d.n == 3, "common steps %d, want 3 (1, 2, 3)", d.n);
  CHECK(d.n == 3 && d.step[0] == 1 && d.step[1] == 2 && d.step[2] == 3, "steps ascending");
  CHECK(d.n == 3 && d.a[1] == 2.0, "step 2 logged twice in A: the last value (2) is compared, got %g",
        d.a[1]);
  CHECK(d.dup_a == 1 && d.dup_b == 0, "duplicates %d %d", d.dup_a, d.dup_b);
  CHECK(d.n_only_a == 1 && d.only_a[0] == 5, "only in A: step 5");
  CHECK(d.n_only_b == 1 && d.only_b[0] == 4, "only in B: step 4");
  /* step 3: |3 - 3.5| = 0.5 > 0.1 * 3.5 = 0.35: the only step beyond */
  CHECK(d.n_beyond == 1 && d.first_beyond == 2, "beyond %d first %d", d.n_beyond, d.first_beyond);
  CHECK(d.max_abs == 0.5 && d.at_max_abs == 2, "max abs %g", d.max_abs);
  CHECK_CLOSE(d.max_rel, 0.5 / 3.5, 1e-15, "max rel");
  CHECK(!loom_runs_diff_ok(&d, false) && !loom_runs_diff_ok(&d, true), "not ok");
  loom_runs_diff_free(&d);
  tol.rtol = 0.5 / 3.5; /* exactly at the boundary: <= passes (as numpy.allclose) */
  loom_runs_diff_compute(&a, &b, &tol, &d);
  CHECK(d.n_beyond == 0, "at the boundary: within, got %d beyond", d.n_beyond);
  CHECK(!loom_runs_diff_ok(&d, false), "step sets differ: not the same");
  CHECK(loom_runs_diff_ok(&d, true), "--common-steps: the same");
  loom_runs_diff_free(&d);
  loom_series_free(&a), loom_series_free(&b);
}

static void test_reference_zero_nan(void) {
  double x[] = {1, 2, 3};
  double ay[] = {2.0, 0.0, NAN}, by[] = {1.0, 0.0, 1.0};
  loom_series a = series(x, ay, 3), b = series(x, by, 3);
  loom_runs_diff_tol tol = {0.5, 0};
  loom_runs_diff d;
  loom_runs_diff_compute(&a, &b, &tol, &d);
  /* step 1: |2-1| = 1 > 0.5*|1| beyond; step 2: 0 = 0 within; step 3: NaN never within */
  CHECK(d.n_beyond == 2 && d.first_beyond == 0, "beyond %d first %d", d.n_beyond, d.first_beyond);
  loom_runs_diff_free(&d);
  loom_runs_diff_compute(&b, &a, &tol, &d); /* swapped: step 1 |1-2| = 1 <= 0.5*|2| */
  CHECK(d.n_beyond == 1 && d.first_beyond == 2, "swapped: beyond %d first %d", d.n_beyond,
        d.first_beyond);
  loom_runs_diff_free(&d);
  double zy[] = {1.0, 0.0, 0.0};
  loom_series z = series(x, zy, 3);
  loom_series one = series(x, (double[]){1.0, 1.0, 0.0}, 3);
  loom_runs_diff_compute(&one, &z, &tol, &d); /* b = 0 != a at step 2: relative inf */
  CHECK(isinf(d.max_rel) && d.at_max_rel == 1, "b = 0: max rel inf at step 2, got %g", d.max_rel);
  loom_runs_diff_free(&d);
  loom_series_free(&a), loom_series_free(&b), loom_series_free(&z), loom_series_free(&one);
}

/* Write `text` (len bytes, may hold NULs) to a temp log, return what loom_sweep_log_error picks. */
static const char *pick(const char *text, size_t len) {
  static char out[256];
  char path[] = "/tmp/loom-log-error-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, text, len) != (ssize_t)len) abort();
  close(fd);
  loom_sweep_log_error(path, out, sizeof out);
  unlink(path);
  return out;
}
#define PICK(s) pick(s, sizeof(s) - 1)

static void test_log_error(void) {
  const char *dashes = "--------------------------------------------------------------------------\n";
  char root[1024];
  snprintf(root, sizeof root,
           "# loom sweep s (id), point p, 2 ranks\n# command: 'mpirun' '-np' '2'\n# cwd: /x\n%s"
           "mpirun has detected an attempt to run as root.\n\nRunning as root is *strongly* "
           "discouraged as any mistake (e.g., in\ndefining TMPDIR) or bug can result in "
           "catastrophic damage to the OS\n%s", dashes, dashes);
  CHECK(!strcmp(pick(root, strlen(root)), "mpirun has detected an attempt to run as root."),
        "root block headline: got '%s'", pick(root, strlen(root)));
  char mix[1024];
  snprintf(mix, sizeof mix,
           "# loom sweep\nstep 1/6 | loss 5.6\nloom: train: rank 1: error: parallel.tp (3) must "
           "divide model.heads (4)\nloom: %sMPI_ABORT was invoked on rank 1 in communicator "
           "MPI_COMM_WORLD\nwith errorcode 1.\n%s[vm:1] 2 more processes have sent help message "
           "/ error messages\n", dashes, dashes);
  CHECK(!strcmp(pick(mix, strlen(mix)),
                "loom: train: rank 1: error: parallel.tp (3) must divide model.heads (4)"),
        "loom's line over mpirun's block and a 'loom: ----' fragment: got '%s'",
        pick(mix, strlen(mix)));
  CHECK(!strcmp(PICK("# loom sweep\nmpirun: Error: unknown option \"--x\"\nType 'mpirun --help' "
                     "for usage.\n"), "mpirun: Error: unknown option \"--x\""),
        "an error line over the last line");
  CHECK(!strcmp(PICK("# h\nsome output\nKilled\n\n"), "Killed"), "else the last non-empty line");
  CHECK(!strcmp(PICK("# only the header\n"), ""), "nothing to say: empty");
  CHECK(!strcmp(PICK("loom train: error: bad\0garbage\nlast line\r\n"), "loom train: error: bad"),
        "a NUL byte does not end the scan; got '%s'",
        PICK("loom train: error: bad\0garbage\nlast line\r\n"));
  CHECK(!strcmp(PICK("x\0loom train: error: after a NUL\n"), "loom train: error: after a NUL"),
        "lines after a NUL are read");
  char out[64] = "unchanged";
  loom_sweep_log_error("/nonexistent/log", out, sizeof out);
  CHECK(out[0] == 0, "missing log: empty");
}

int main(void) {
  test_align();
  test_reference_zero_nan();
  test_log_error();
  return harness_finish("test_runs_diff");
}
