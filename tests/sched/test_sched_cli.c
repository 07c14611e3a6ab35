/* `loom sched` end to end: show prints the library's text form (which parses, validates and
 * which `loom sched validate` accepts) followed by the bubble and peak in-flight lines; grid
 * format; validate of good and bad files (exit 1 with the message on stderr); --help; usage
 * errors (exit 2). */
#include "sched_test_util.h"

/* `loom sched show ARGS` must print to_text of the generated schedule plus metric lines, and
 * the printed text must be accepted by `loom sched validate`. */
static void check_show(const char *name, int pp, int vpp, int m, const char *bubble) {
  char *args = loom_sprintf("sched show --pp %d --microbatches %d --schedule %s --vpp %d", pp, m,
                            name, vpp);
  run_result r = run_loom(args);
  free(args);
  CHECK(r.status == 0, "show %s pp=%d: exit %d: %s", name, pp, r.status, r.err);
  loom_schedule s;
  CHECK(loom_sched_generate(&s, name, pp, vpp, m) == 0, "%s", loom_errmsg());
  char *want = loom_sched_to_text(&s);
  CHECK(!strncmp(r.out, want, strlen(want)), "show prints the text form first:\n%s", r.out);
  char *line = loom_sprintf("# bubble fraction: %s ", bubble);
  CHECK(strstr(r.out + strlen(want), line), "bubble line '%s' in:\n%s", line, r.out);
  CHECK(strstr(r.out, "# peak in-flight micro-batches per rank:"), "peak line");
  free(line);
  free(want);
  loom_sched_free(&s);
  /* the whole output (comments included) is a valid schedule file */
  loom_mkdir_p("sched-cli.tmp");
  CHECK(loom_write_file_atomic("sched-cli.tmp/shown.txt", r.out, strlen(r.out)) == 0, "write");
  run_done(&r);
  r = run_loom("sched validate sched-cli.tmp/shown.txt");
  CHECK(r.status == 0 && strstr(r.out, "OK: sched-cli.tmp/shown.txt"), "validate shown: %d %s%s",
        r.status, r.out, r.err);
  run_done(&r);
}

static void test_show(void) {
  check_show("1f1b", 4, 1, 8, "0.3750");
  check_show("gpipe", 3, 1, 4, "0.5000");
  check_show("interleaved", 4, 2, 8, "0.1875");
  check_show("none", 1, 1, 3, "0.0000");
  run_result r = run_loom("sched show --pp 4 --microbatches 8");
  CHECK(r.status == 0 && strstr(r.out, "schedule name=1f1b pp=4 vpp=1 microbatches=8\n"),
        "default schedule is 1f1b: %s", r.err);
  CHECK(strstr(r.out, "# peak in-flight micro-batches per rank: 4 3 2 1\n"), "1f1b peaks:\n%s",
        r.out);
  run_done(&r);
}

static void test_grid(void) {
  run_result r = run_loom("sched show --pp 2 --microbatches 2 --schedule 1f1b --format grid");
  CHECK(r.status == 0, "grid exit %d: %s", r.status, r.err);
  CHECK(strstr(r.out, "rank 0 | F0 F1 .  .  B0 B0 .  B1 B1\n") &&
            strstr(r.out, "rank 1 | .  F0 B0 B0 F1 B1 B1 .  .\n") &&
            strstr(r.out, "# bubble fraction: 0.5000 "),
        "grid:\n%s", r.out);
  run_done(&r);
  r = run_loom("sched show --file '" LOOM_SOURCE_DIR "/tests/sched/fixtures/custom_zb.txt' "
               "--format grid");
  CHECK(r.status == 0 && strstr(r.out, "rank 0 | F0 F1 .  I0 .  I1 W0 W1\n"),
        "grid of a file: %s%s", r.out, r.err);
  run_done(&r);
}

static void test_validate_files(void) {
  char *args = loom_sprintf("sched validate '%s'", fixture("custom_zb.txt"));
  run_result r = run_loom(args);
  free(args);
  CHECK(r.status == 0 && strstr(r.out, "OK: ") && strstr(r.out, "schedule zb-h1, pp=2"),
        "validate custom: %d %s%s", r.status, r.out, r.err);
  run_done(&r);
  args = loom_sprintf("sched validate '%s'", fixture("bad_deadlock.txt"));
  r = run_loom(args);
  free(args);
  CHECK(r.status == 1, "bad file exits 1, got %d", r.status);
  CHECK(contains_all(r.err, "loom sched validate: deadlock",
                     "rank 0, instruction 2 'recv-grad chunk=0 mb=0 from=1'",
                     "rank 1, instruction 1 'recv-act chunk=0 mb=0 from=0'", (const char *)NULL),
        "stderr: %s", r.err);
  CHECK(r.out[0] == 0, "nothing on stdout: %s", r.out);
  run_done(&r);
  args = loom_sprintf("sched validate '%s'", fixture("bad_parse.txt"));
  r = run_loom(args);
  free(args);
  CHECK(r.status == 1 && strstr(r.err, "bad_parse.txt:6: unknown instruction 'backwrd'"),
        "parse error: %d %s", r.status, r.err);
  run_done(&r);
  r = run_loom("sched validate sched-cli.tmp/no-such-file.txt");
  CHECK(r.status == 1 && strstr(r.err, "no-such-file.txt"), "missing file: %d %s", r.status,
        r.err);
  run_done(&r);
  r = run_loom("sched show --file '" LOOM_SOURCE_DIR "/tests/sched/fixtures/bad_deadlock.txt'");
  CHECK(r.status == 1 && strstr(r.err, "deadlock"), "show --file validates: %d %s", r.status,
        r.err);
  run_done(&r);
}

static void test_help_and_usage(void) {
  static const struct {
    const char *args, *want;
  } helps[] = {{"sched --help", "loom sched validate FILE"},
               {"sched show --help", "--microbatches M"},
               {"sched validate --help", "usage: loom sched validate FILE"},
               {"help sched", "loom sched show"}};
  for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
    run_result r = run_loom(helps[i].args);
    CHECK(r.status == 0 && strstr(r.out, helps[i].want), "%s: %d %s", helps[i].args, r.status,
          r.out);
    run_done(&r);
  }
  static const struct {
    const char *args, *want;
    int status;
  } bad[] = {{"sched", "usage: loom sched", 2},
             {"sched frobnicate", "unknown subcommand 'frobnicate'", 2},
             {"sched show --pp 4", "--pp and --microbatches are required", 2},
             {"sched show --pp four --microbatches 8", "--pp needs a positive integer", 2},
             {"sched show --pp 4 --microbatches 8 --colour red", "unknown option '--colour'", 2},
             {"sched show --pp 4 --microbatches", "missing value after '--microbatches'", 2},
             {"sched show --pp 4 --microbatches 8 --format svg", "text or grid", 2},
             {"sched show --pp 4 --microbatches 8 --schedule gpipe --vpp 2", "vpp = 2", 1},
             {"sched show --pp 4 --microbatches 8 --schedule zb", "unknown schedule 'zb'", 1},
             {"sched validate", "usage: loom sched validate", 2}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    run_result r = run_loom(bad[i].args);
    CHECK(r.status == bad[i].status && strstr(r.err, bad[i].want), "%s: exit %d (want %d): %s",
          bad[i].args, r.status, bad[i].status, r.err);
    run_done(&r);
  }
}

int main(void) {
  test_show();
  test_grid();
  test_validate_files();
  test_help_and_usage();
  return harness_finish("test_sched_cli");
}
