/* The text form's parser: what it accepts (comments, blank lines, CRLF, keys in any order,
 * empty rank sections) and each syntax error, reported as file:line with what was expected. */
#include "sched_test_util.h"

/* Parse must fail; the message must start with "t.txt:LINE: " and hold the substrings. */
#define CHECK_PARSE_ERR(text, line, ...)                                                 \
  do {                                                                                   \
    loom_schedule s_;                                                                    \
    char where_[32];                                                                     \
    snprintf(where_, sizeof where_, "t.txt:%d: ", line);                                 \
    CHECK(loom_sched_parse(&s_, text, "t.txt") < 0, "parse should fail: %s", text);       \
    CHECK(!strncmp(loom_errmsg(), where_, strlen(where_)), "want %s... got: %s", where_,   \
          loom_errmsg());                                                                \
    CHECK_MSG(__VA_ARGS__);                                                              \
    CHECK(s_.count == NULL && s_.pp == 0, "failed parse leaves the schedule empty");      \
  } while (0)

static void test_accepts(void) {
  const char *text =
      "  # leading comment\r\n"
      "\r\n"
      "schedule microbatches=1 vpp=1 pp=2   # keys in any order, no name\r\n"
      "rank 1\r\n"
      "\tload mb=0\r\n"
      "  recv-act from=0 mb=0 chunk=0\r\n"
      "  forward mb=0 chunk=0\r\n"
      "  backward chunk=0 mb=0\r\n"
      "  send-grad to=0 chunk=0 mb=0\r\n"
      "  reduce-grads\r\n"
      "  optimizer-step\r\n"
      "rank 0   # sections in any order\r\n"
      "load mb=0\r\n"
      "forward chunk=0 mb=0\n"
      "send-act chunk=0 mb=0 to=1\n"
      "recv-grad chunk=0 mb=0 from=1\n"
      "backward chunk=0 mb=0\n"
      "reduce-grads\n"
      "optimizer-step";  /* no final newline */
  loom_schedule s;
  CHECK(loom_sched_parse(&s, text, "t.txt") == 0, "%s", loom_errmsg());
  CHECK(!strcmp(s.name, "custom") && s.pp == 2 && s.vpp == 1 && s.microbatches == 1,
        "header: %s %d %d %d", s.name, s.pp, s.vpp, s.microbatches);
  CHECK(s.count[0] == 7 && s.count[1] == 7, "counts %d %d", s.count[0], s.count[1]);
  CHECK(s.instr[1][1].kind == LOOM_INSTR_RECV_ACT && s.instr[1][1].chunk == 0 &&
            s.instr[1][1].mb == 0 && s.instr[1][1].peer == 0,
        "recv-act fields");
  CHECK(s.instr[0][5].kind == LOOM_INSTR_REDUCE_GRADS && s.instr[0][5].chunk == -1 &&
            s.instr[0][5].mb == -1 && s.instr[0][5].peer == -1,
        "reduce-grads without chunk");
  CHECK(loom_sched_validate(&s) == 0, "%s", loom_errmsg());
  /* canonical text: parses back to the same lists */
  char *canon = loom_sched_to_text(&s);
  loom_schedule back;
  CHECK(loom_sched_parse(&back, canon, "canon.txt") == 0, "%s", loom_errmsg());
  char *again = loom_sched_to_text(&back);
  CHECK(!strcmp(canon, again), "canonical text is stable:\n%s\n%s", canon, again);
  CHECK(strstr(canon, "schedule name=custom pp=2 vpp=1 microbatches=1\nrank 0\n  load mb=0\n"),
        "canonical header and order:\n%s", canon);
  free(canon);
  free(again);
  loom_sched_free(&back);
  loom_sched_free(&s);
  /* empty rank sections parse (validation reports them) */
  CHECK(loom_sched_parse(&s, "schedule pp=2 vpp=1 microbatches=1\nrank 0\nrank 1\n", "t.txt") ==
            0, "%s", loom_errmsg());
  CHECK(s.count[0] == 0 && s.count[1] == 0, "empty lists");
  CHECK(loom_sched_validate(&s) < 0, "empty lists are invalid");
  CHECK_MSG("rank 0, end of list (the list is empty)", "'forward chunk=0 mb=0' is missing");
  loom_sched_free(&s);
  /* optional chunk on reduce-grads/gather-params, names with punctuation */
  CHECK(loom_sched_parse(&s, "schedule name=my.zb-v2+x pp=1 vpp=2 microbatches=1\nrank 0\n"
                             "  gather-params chunk=1\n  reduce-grads chunk=0\n", "t.txt") == 0,
        "%s", loom_errmsg());
  CHECK(!strcmp(s.name, "my.zb-v2+x") && s.instr[0][0].chunk == 1, "name and optional chunk");
  loom_sched_free(&s);
}

static void test_errors(void) {
  CHECK_PARSE_ERR("", 1, "no schedule line");
  CHECK_PARSE_ERR("# only a comment\n\n", 2, "no schedule line");
  CHECK_PARSE_ERR("rank 0\n", 1, "expected the header 'schedule", "found 'rank'");
  CHECK_PARSE_ERR("schedule pp=2 vpp=1\n", 1, "needs microbatches=N");
  CHECK_PARSE_ERR("schedule pp=2 vpp=1 microbatches=4 stages=2\n", 1, "unknown key 'stages'",
                  "pp=, vpp=, microbatches=");
  CHECK_PARSE_ERR("schedule pp=2 pp=3 vpp=1 microbatches=4\n", 1, "pp= is given twice");
  CHECK_PARSE_ERR("schedule pp=two vpp=1 microbatches=4\n", 1, "pp='two'",
                  "non-negative integer");
  CHECK_PARSE_ERR("schedule pp=-1 vpp=1 microbatches=4\n", 1, "pp='-1'");
  CHECK_PARSE_ERR("schedule pp=0 vpp=1 microbatches=4\n", 1, "pp = 0 is out of range");
  CHECK_PARSE_ERR("schedule pp 2 vpp=1 microbatches=4\n", 1, "expected key=value", "'pp'");
  CHECK_PARSE_ERR("schedule name=a/b pp=1 vpp=1 microbatches=1\n", 1, "name='a/b'");
  CHECK_PARSE_ERR("schedule pp=1 vpp=1 microbatches=1\nschedule pp=1 vpp=1 microbatches=1\n", 2,
                  "second schedule line", "line 1");
  CHECK_PARSE_ERR("schedule pp=1 vpp=1 microbatches=1\nload mb=0\n", 2,
                  "'load' before any 'rank N' line");
  CHECK_PARSE_ERR("schedule pp=2 vpp=1 microbatches=1\nrank 2\n", 2, "rank 2 is out of range",
                  "0..1");
  CHECK_PARSE_ERR("schedule pp=2 vpp=1 microbatches=1\nrank\n", 2, "expected 'rank N'");
  CHECK_PARSE_ERR("schedule pp=2 vpp=1 microbatches=1\nrank 0 1\n", 2, "expected 'rank N'");
  CHECK_PARSE_ERR("schedule pp=2 vpp=1 microbatches=1\nrank 0\nrank 0\n", 3,
                  "rank 0 appears twice", "line 2");
  CHECK_PARSE_ERR("schedule pp=3 vpp=1 microbatches=1\nrank 0\nrank 2\n", 1,
                  "rank 1 has no 'rank 1' section", "pp=3");
  CHECK_PARSE_ERR("schedule pp=1 vpp=1 microbatches=1\nrank 0\n\n  forwad chunk=0 mb=0\n", 4,
                  "unknown instruction 'forwad'", "forward, backward", "optimizer-step");
  CHECK_PARSE_ERR("schedule pp=2 vpp=1 microbatches=1\nrank 0\n  send-act chunk=0 mb=0\n", 3,
                  "send-act needs to=", "expected: send-act chunk=C mb=M to=RANK");
  CHECK_PARSE_ERR("schedule pp=2 vpp=1 microbatches=1\nrank 0\n  recv-act chunk=0 mb=0 to=1\n",
                  3, "'to' is not a field of this instruction",
                  "recv-act chunk=C mb=M from=RANK");
  CHECK_PARSE_ERR("schedule pp=1 vpp=1 microbatches=1\nrank 0\n  load mb=0 mb=0\n", 3,
                  "mb= is given twice");
  CHECK_PARSE_ERR("schedule pp=1 vpp=1 microbatches=1\nrank 0\n  optimizer-step chunk=0\n", 3,
                  "'chunk' is not a field", "expected: optimizer-step)");
  CHECK_PARSE_ERR("schedule pp=1 vpp=1 microbatches=1\nrank 0\n  forward chunk=0 mb=x\n", 3,
                  "mb='x' is not a non-negative integer");
  CHECK_PARSE_ERR("schedule pp=1 vpp=1 microbatches=4\nrank 0\n  forward chunk=0 mb=4\n", 3,
                  "mb=4 is out of range", "micro-batches 0..3 (microbatches=4)");
  CHECK_PARSE_ERR("schedule pp=1 vpp=2 microbatches=4\nrank 0\n  forward chunk=2 mb=0\n", 3,
                  "chunk=2 is out of range", "chunks 0..1 (vpp=2)");
  CHECK_PARSE_ERR("schedule pp=2 vpp=1 microbatches=4\nrank 0\n  send-act chunk=0 mb=0 to=5\n",
                  3, "to=5 is out of range", "ranks 0..1 (pp=2)");
  CHECK_PARSE_ERR("schedule pp=1 vpp=1 microbatches=4\nrank 0\n  forward chunk=0 mb\n", 3,
                  "expected key=value, found 'mb'", "forward chunk=C mb=M");
  CHECK_PARSE_ERR("schedule pp=1 vpp=1 microbatches=4\nrank 0\n  forward chunk=0 mb=9999999999\n",
                  3, "mb='9999999999'");
  CHECK_PARSE_ERR("schedule pp=1 vpp=1 microbatches=4\nrank 0\n  load a=1 b=2 c=3 d=4 e=5 f=6 "
                  "g=7 h=8\n", 3, "too many words");
}

static void test_load(void) {
  loom_schedule s;
  CHECK(loom_sched_load(&s, "sched-parse.tmp/does-not-exist.txt") < 0, "missing file");
  CHECK_MSG("does-not-exist.txt");
  CHECK(s.count == NULL, "empty after failure");
  CHECK(loom_sched_load(&s, fixture("bad_parse.txt")) < 0, "bad_parse.txt");
  CHECK_MSG("bad_parse.txt:6: ", "unknown instruction 'backwrd'");
  CHECK(loom_sched_load(&s, fixture("1f1b_pp2_m2.txt")) == 0, "%s", loom_errmsg());
  CHECK(!strcmp(s.name, "1f1b") && s.pp == 2 && s.count[0] == 12, "golden 1f1b loaded");
  loom_sched_free(&s);
  /* a directory (read as INT64_MAX bytes on ext4 and aborted in malloc before) */
  loom_mkdir_p("sched-parse.tmp/dir.txt");
  CHECK(loom_sched_load(&s, "sched-parse.tmp/dir.txt") < 0, "a directory loaded");
  CHECK_MSG("schedule file 'sched-parse.tmp/dir.txt' is a directory");
}

int main(void) {
  test_accepts();
  test_errors();
  test_load();
  return harness_finish("test_sched_parse");
}
