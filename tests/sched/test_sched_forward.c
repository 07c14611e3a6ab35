/* The forward-only (evaluation) schedule: for every shape the generator gives exactly one
 * forward per (chunk, micro-batch) on each rank, every send matched, only forward-pass
 * instructions, and it validates (no deadlock); the training validator refuses it (no
 * backward), and the forward-only validator refuses broken forward lists with a message
 * naming the rank, instruction and reason. */
#include "sched_test_util.h"

static int count_kind(const loom_schedule *s, int r, loom_instr_kind k) {
  int n = 0;
  for (int i = 0; i < s->count[r]; i++) n += s->instr[r][i].kind == k;
  return n;
}

static void test_generated_shapes(void) {
  int shapes[][3] = {{1, 1, 1}, {1, 1, 4}, {1, 2, 3}, {2, 1, 1}, {2, 1, 4}, {3, 1, 2},
                     {4, 1, 8}, {2, 2, 4}, {2, 3, 2}, {4, 2, 3}, {8, 1, 1}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    int pp = shapes[k][0], vpp = shapes[k][1], m = shapes[k][2];
    loom_schedule s;
    CHECK(loom_sched_generate_forward(&s, pp, vpp, m) == 0, "generate %d/%d/%d: %s", pp, vpp, m,
          loom_errmsg());
    CHECK(loom_sched_validate_forward(&s) == 0, "validate %d/%d/%d: %s", pp, vpp, m, loom_errmsg());
    CHECK(loom_sched_validate(&s) < 0, "the training validator accepts a forward-only list");
    for (int r = 0; r < pp; r++) {
      CHECK(count_kind(&s, r, LOOM_INSTR_FORWARD) == vpp * m, "pp=%d vpp=%d m=%d rank %d: %d forwards",
            pp, vpp, m, r, count_kind(&s, r, LOOM_INSTR_FORWARD));
      int sends = 0, recvs = 0;
      for (int c = 0; c < vpp; c++) {
        int v = c * pp + r;
        sends += (v < pp * vpp - 1 && pp > 1) * m;
        recvs += (v > 0 && pp > 1) * m;
      }
      CHECK(count_kind(&s, r, LOOM_INSTR_SEND_ACT) == sends, "rank %d send-act", r);
      CHECK(count_kind(&s, r, LOOM_INSTR_RECV_ACT) == recvs, "rank %d recv-act", r);
      CHECK(count_kind(&s, r, LOOM_INSTR_BACKWARD) + count_kind(&s, r, LOOM_INSTR_SEND_GRAD) +
                    count_kind(&s, r, LOOM_INSTR_RECV_GRAD) + count_kind(&s, r, LOOM_INSTR_REDUCE_GRADS) +
                    count_kind(&s, r, LOOM_INSTR_OPTIMIZER_STEP) == 0,
            "rank %d holds backward-pass or optimizer instructions", r);
    }
    loom_sched_free(&s);
  }
}

static int parse_and_validate_forward(const char *text) {
  loom_schedule s;
  if (loom_sched_parse(&s, text, "inline.txt")) {
    fprintf(stderr, "  unexpected parse error: %s\n", loom_errmsg());
    return -2;
  }
  int rc = loom_sched_validate_forward(&s);
  loom_sched_free(&s);
  return rc;
}

#define HEAD "schedule pp=2 vpp=1 microbatches=2\n"
#define R0 "rank 0\n  load mb=0\n  forward chunk=0 mb=0\n  send-act chunk=0 mb=0 to=1\n" \
           "  load mb=1\n  forward chunk=0 mb=1\n  send-act chunk=0 mb=1 to=1\n"
#define R1 "rank 1\n  load mb=0\n  recv-act chunk=0 mb=0 from=0\n  forward chunk=0 mb=0\n" \
           "  load mb=1\n  recv-act chunk=0 mb=1 from=0\n  forward chunk=0 mb=1\n"

static void test_broken_lists(void) {
  CHECK(parse_and_validate_forward(HEAD R0 R1) == 0, "base: %s", loom_errmsg());
  /* a backward in an evaluation */
  CHECK(parse_and_validate_forward(HEAD R0 R1 "  backward chunk=0 mb=1\n") < 0, "backward accepted");
  CHECK_MSG("rank 1, instruction 6 'backward chunk=0 mb=1'", "only load, recv-act, forward and send-act");
  /* a micro-batch never goes forward on rank 1 (its activation is still received) */
  CHECK(parse_and_validate_forward(HEAD R0 "rank 1\n  load mb=0\n  recv-act chunk=0 mb=0 from=0\n"
                                   "  forward chunk=0 mb=0\n  load mb=1\n"
                                   "  recv-act chunk=0 mb=1 from=0\n") < 0, "missing forward");
  CHECK_MSG("rank 1", "missing 'forward chunk=0 mb=1'");
  /* forward before its input arrived */
  CHECK(parse_and_validate_forward(HEAD R0 "rank 1\n  load mb=0\n  forward chunk=0 mb=0\n"
                                   "  recv-act chunk=0 mb=0 from=0\n  load mb=1\n"
                                   "  recv-act chunk=0 mb=1 from=0\n  forward chunk=0 mb=1\n") < 0,
        "forward before recv");
  CHECK_MSG("rank 1, instruction 1 'forward chunk=0 mb=0'", "input activation has not been received");
  /* the receives in the opposite order of the sends still cannot deadlock (sends are
   * asynchronous), but receiving mb 1 on rank 0 from rank 1 is a wrong peer */
  CHECK(parse_and_validate_forward(HEAD "rank 0\n  load mb=0\n  forward chunk=0 mb=0\n"
                                   "  load mb=1\n  forward chunk=0 mb=1\n" R1) < 0, "unmatched recv");
  CHECK_MSG("recv with no matching send");
  /* pp=1, vpp=2: chunk 1 before chunk 0 */
  CHECK(parse_and_validate_forward("schedule pp=1 vpp=2 microbatches=1\nrank 0\n  load mb=0\n"
                                   "  forward chunk=1 mb=0\n  forward chunk=0 mb=0\n") < 0,
        "chunk order");
  CHECK_MSG("rank 0, instruction 1 'forward chunk=1 mb=0'", "'forward chunk=0 mb=0', which has not run");
  /* a deadlock: both ranks receive before they send */
  CHECK(parse_and_validate_forward("schedule pp=2 vpp=2 microbatches=1\n"
                                   "rank 0\n  load mb=0\n  recv-act chunk=1 mb=0 from=1\n"
                                   "  forward chunk=0 mb=0\n  send-act chunk=0 mb=0 to=1\n"
                                   "  forward chunk=1 mb=0\n  send-act chunk=1 mb=0 to=1\n"
                                   "rank 1\n  recv-act chunk=0 mb=0 from=0\n  forward chunk=0 mb=0\n"
                                   "  send-act chunk=0 mb=0 to=0\n  recv-act chunk=1 mb=0 from=0\n"
                                   "  load mb=0\n  forward chunk=1 mb=0\n") < 0, "deadlock accepted");
  CHECK_MSG("deadlock");
}

int main(void) {
  test_generated_shapes();
  test_broken_lists();
  return harness_finish("test_sched_forward");
}
