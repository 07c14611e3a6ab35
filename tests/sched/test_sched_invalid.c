/* loom_sched_validate on broken schedules: each is rejected with a message naming the rank,
 * the instruction index and text, and the reason. The cases start from a valid pp=2, m=1
 * schedule (or a pp=1 one) with one line changed. */
#include "sched_test_util.h"

#define HEAD2 "schedule pp=2 vpp=1 microbatches=1\n"
#define RANK0_OK                                                                           \
  "rank 0\n  load mb=0\n  forward chunk=0 mb=0\n  send-act chunk=0 mb=0 to=1\n"            \
  "  recv-grad chunk=0 mb=0 from=1\n  backward chunk=0 mb=0\n  reduce-grads\n"             \
  "  optimizer-step\n"
#define RANK1_OK                                                                           \
  "rank 1\n  load mb=0\n  recv-act chunk=0 mb=0 from=0\n  forward chunk=0 mb=0\n"          \
  "  backward chunk=0 mb=0\n  send-grad chunk=0 mb=0 to=0\n  reduce-grads\n"               \
  "  optimizer-step\n"
#define TAIL "  reduce-grads\n  optimizer-step\n"

static void test_base_is_valid(void) {
  CHECK(parse_and_validate(HEAD2 RANK0_OK RANK1_OK) == 0, "base: %s", loom_errmsg());
}

static void test_unmatched_send(void) {
  CHECK(parse_and_validate(HEAD2 RANK0_OK
                           "rank 1\n  load mb=0\n  forward chunk=0 mb=0\n"
                           "  backward chunk=0 mb=0\n  send-grad chunk=0 mb=0 to=0\n" TAIL) < 0,
        "send without recv");
  CHECK_MSG("rank 0, instruction 2 'send-act chunk=0 mb=0 to=1'", "unmatched send",
            "rank 1 has no 'recv-act chunk=0 mb=0 from=0'");
}

static void test_recv_without_send(void) {
  CHECK(parse_and_validate(HEAD2
                           "rank 0\n  load mb=0\n  forward chunk=0 mb=0\n"
                           "  recv-grad chunk=0 mb=0 from=1\n  backward chunk=0 mb=0\n" TAIL
                           RANK1_OK) < 0,
        "recv without send");
  CHECK_MSG("rank 1, instruction 1 'recv-act chunk=0 mb=0 from=0'", "recv with no matching send",
            "rank 0 has no 'send-act chunk=0 mb=0 to=1'");
}

static void test_backward_before_forward(void) {
  CHECK(parse_and_validate("schedule pp=1 vpp=1 microbatches=1\nrank 0\n  load mb=0\n"
                           "  backward chunk=0 mb=0\n  forward chunk=0 mb=0\n" TAIL) < 0,
        "backward first");
  CHECK_MSG("rank 0, instruction 1 'backward chunk=0 mb=0'", "backward before forward");
}

static void test_missing_backward(void) {
  CHECK(parse_and_validate("schedule pp=1 vpp=1 microbatches=2\nrank 0\n  load mb=0\n"
                           "  forward chunk=0 mb=0\n  backward chunk=0 mb=0\n  load mb=1\n"
                           "  forward chunk=0 mb=1\n" TAIL) < 0,
        "no backward for mb 1");
  CHECK_MSG("rank 0, instruction 5 'reduce-grads'", "'backward chunk=0 mb=1' has not run");
  /* Without the tail the end-of-list check names the forward that lacks its backward. */
  CHECK(parse_and_validate("schedule pp=1 vpp=1 microbatches=2\nrank 0\n  load mb=0\n"
                           "  forward chunk=0 mb=0\n  backward chunk=0 mb=0\n  load mb=1\n"
                           "  forward chunk=0 mb=1\n") < 0,
        "no backward, no tail");
  CHECK_MSG("rank 0, instruction 4 'forward chunk=0 mb=1'", "missing backward");
}

static void test_duplicate_forward(void) {
  CHECK(parse_and_validate("schedule pp=1 vpp=1 microbatches=1\nrank 0\n  load mb=0\n"
                           "  forward chunk=0 mb=0\n  forward chunk=0 mb=0\n"
                           "  backward chunk=0 mb=0\n" TAIL) < 0,
        "forward twice");
  CHECK_MSG("rank 0, instruction 2 'forward chunk=0 mb=0'", "duplicate forward",
            "already ran at instruction 1");
}

static void test_deadlock(void) {
  /* Rank 0 waits for the gradient before sending the activation; rank 1 waits for that
   * activation before it can produce the gradient. */
  CHECK(parse_and_validate(HEAD2
                           "rank 0\n  load mb=0\n  forward chunk=0 mb=0\n"
                           "  recv-grad chunk=0 mb=0 from=1\n  send-act chunk=0 mb=0 to=1\n"
                           "  backward chunk=0 mb=0\n" TAIL RANK1_OK) < 0,
        "deadlock");
  CHECK_MSG("deadlock", "rank 0, instruction 2 'recv-grad chunk=0 mb=0 from=1'",
            "rank 1's instruction 4 'send-grad chunk=0 mb=0 to=0'",
            "rank 1, instruction 1 'recv-act chunk=0 mb=0 from=0'",
            "rank 0's instruction 3 'send-act chunk=0 mb=0 to=1'");
  /* Three ranks: in 1F1B (pp=3, m=2) rank 1 moves 'send-act mb=1' after 'recv-grad mb=1',
   * the gradient that needs that very activation; rank 0 then waits on rank 1 too. */
  loom_schedule s;
  CHECK(loom_sched_generate(&s, "1f1b", 3, 1, 2) == 0, "%s", loom_errmsg());
  int send = -1, recv = -1;
  for (int i = 0; i < s.count[1]; i++) {
    const loom_instr *in = &s.instr[1][i];
    if (in->kind == LOOM_INSTR_SEND_ACT && in->mb == 1) send = i;
    if (in->kind == LOOM_INSTR_RECV_GRAD && in->mb == 1) recv = i;
  }
  CHECK(send >= 0 && recv > send, "rank 1 layout: send-act mb 1 at %d, recv-grad mb 1 at %d",
        send, recv);
  if (send >= 0 && recv > send) {
    loom_instr moved = s.instr[1][send];
    memmove(&s.instr[1][send], &s.instr[1][send + 1], (size_t)(recv - send) * sizeof moved);
    s.instr[1][recv] = moved;
    CHECK(loom_sched_validate(&s) < 0, "three-rank deadlock");
    CHECK_MSG("deadlock", "rank 0, instruction", "rank 1, instruction", "rank 2, instruction",
              "'recv-grad chunk=0 mb=1 from=2'");
  }
  loom_sched_free(&s);
}

static void test_wrong_peer(void) {
  CHECK(parse_and_validate("schedule pp=3 vpp=1 microbatches=1\nrank 0\n  load mb=0\n"
                           "  forward chunk=0 mb=0\n  send-act chunk=0 mb=0 to=2\n"
                           "rank 1\nrank 2\n") < 0,
        "send to the wrong rank");
  CHECK_MSG("rank 0, instruction 2 'send-act chunk=0 mb=0 to=2'", "wrong peer",
            "is stage 1, which is chunk 0 on rank 1");
  CHECK(parse_and_validate("schedule pp=3 vpp=1 microbatches=1\nrank 0\nrank 1\n"
                           "  recv-grad chunk=0 mb=0 from=0\nrank 2\n") < 0,
        "recv-grad from upstream");
  CHECK_MSG("rank 1, instruction 0 'recv-grad chunk=0 mb=0 from=0'", "wrong peer", "rank 2");
}

static void test_recv_act_first_stage(void) {
  CHECK(parse_and_validate(HEAD2 "rank 0\n  recv-act chunk=0 mb=0 from=1\n" RANK1_OK) < 0,
        "recv-act on stage 0");
  CHECK_MSG("rank 0, instruction 0 'recv-act chunk=0 mb=0 from=1'", "first virtual stage",
            "receives no activation");
  CHECK(parse_and_validate(HEAD2 RANK0_OK "rank 1\n  send-act chunk=0 mb=0 to=0\n") < 0,
        "send-act on the last stage");
  CHECK_MSG("rank 1, instruction 0 'send-act chunk=0 mb=0 to=0'", "last virtual stage");
}

static void test_order_rules(void) {
  /* recv after the forward that consumes it */
  CHECK(parse_and_validate(HEAD2 RANK0_OK
                           "rank 1\n  load mb=0\n  forward chunk=0 mb=0\n"
                           "  recv-act chunk=0 mb=0 from=0\n  backward chunk=0 mb=0\n"
                           "  send-grad chunk=0 mb=0 to=0\n" TAIL) < 0,
        "recv after use");
  CHECK_MSG("rank 1, instruction 1 'forward chunk=0 mb=0'", "not been received",
            "recv-act chunk=0 mb=0 from=0");
  /* no load before the first stage's forward */
  CHECK(parse_and_validate("schedule pp=1 vpp=1 microbatches=1\nrank 0\n"
                           "  forward chunk=0 mb=0\n  backward chunk=0 mb=0\n" TAIL) < 0,
        "no load");
  CHECK_MSG("rank 0, instruction 0 'forward chunk=0 mb=0'", "not loaded", "load mb=0");
  /* split backward: weight before input */
  CHECK(parse_and_validate("schedule pp=1 vpp=1 microbatches=1\nrank 0\n  load mb=0\n"
                           "  forward chunk=0 mb=0\n  backward-weight chunk=0 mb=0\n"
                           "  backward-input chunk=0 mb=0\n" TAIL) < 0,
        "W before I");
  CHECK_MSG("rank 0, instruction 2 'backward-weight chunk=0 mb=0'", "before backward-input");
  /* split backward in order is fine; a missing weight half is reported */
  CHECK(parse_and_validate("schedule pp=1 vpp=1 microbatches=1\nrank 0\n  load mb=0\n"
                           "  forward chunk=0 mb=0\n  backward-input chunk=0 mb=0\n"
                           "  backward-weight chunk=0 mb=0\n" TAIL) == 0,
        "I then W: %s", loom_errmsg());
  CHECK(parse_and_validate("schedule pp=1 vpp=1 microbatches=1\nrank 0\n  load mb=0\n"
                           "  forward chunk=0 mb=0\n  backward-input chunk=0 mb=0\n") < 0,
        "I without W");
  CHECK_MSG("rank 0, instruction 2 'backward-input chunk=0 mb=0'", "backward-weight");
  /* instruction after optimizer-step; missing optimizer-step */
  CHECK(parse_and_validate("schedule pp=1 vpp=1 microbatches=1\nrank 0\n  load mb=0\n"
                           "  forward chunk=0 mb=0\n  backward chunk=0 mb=0\n" TAIL
                           "  gather-params\n") < 0,
        "after optimizer-step");
  CHECK_MSG("rank 0, instruction 5 'gather-params'", "after optimizer-step");
  CHECK(parse_and_validate("schedule pp=1 vpp=1 microbatches=1\nrank 0\n  load mb=0\n"
                           "  forward chunk=0 mb=0\n  backward chunk=0 mb=0\n"
                           "  reduce-grads\n") < 0,
        "no optimizer-step");
  CHECK_MSG("rank 0, end of list (after instruction 3 'reduce-grads')", "no optimizer-step");
  /* duplicate send (found by matching) and duplicate load */
  CHECK(parse_and_validate(HEAD2
                           "rank 0\n  load mb=0\n  forward chunk=0 mb=0\n"
                           "  send-act chunk=0 mb=0 to=1\n  send-act chunk=0 mb=0 to=1\n"
                           "  recv-grad chunk=0 mb=0 from=1\n  backward chunk=0 mb=0\n" TAIL
                           RANK1_OK) < 0,
        "send twice");
  CHECK_MSG("rank 0, instruction 3 'send-act chunk=0 mb=0 to=1'", "duplicate",
            "instruction 2");
  CHECK(parse_and_validate("schedule pp=1 vpp=1 microbatches=1\nrank 0\n  load mb=0\n"
                           "  load mb=0\n  forward chunk=0 mb=0\n  backward chunk=0 mb=0\n"
                           TAIL) < 0,
        "load twice");
  CHECK_MSG("rank 0, instruction 1 'load mb=0'", "already loaded");
  /* local chunks (pp = 1, vpp = 2): chunk 1 needs chunk 0's output; sends are not allowed */
  CHECK(parse_and_validate("schedule pp=1 vpp=2 microbatches=1\nrank 0\n  load mb=0\n"
                           "  forward chunk=1 mb=0\n") < 0,
        "chunk order");
  CHECK_MSG("rank 0, instruction 1 'forward chunk=1 mb=0'", "'forward chunk=0 mb=0'");
  CHECK(parse_and_validate("schedule pp=1 vpp=2 microbatches=1\nrank 0\n  load mb=0\n"
                           "  forward chunk=0 mb=0\n  send-act chunk=0 mb=0 to=0\n") < 0,
        "send with pp=1");
  CHECK_MSG("rank 0, instruction 2 'send-act chunk=0 mb=0 to=0'", "pp = 1", "locally");
  /* reduce-grads of one chunk twice */
  CHECK(parse_and_validate("schedule pp=1 vpp=1 microbatches=1\nrank 0\n  load mb=0\n"
                           "  forward chunk=0 mb=0\n  backward chunk=0 mb=0\n"
                           "  reduce-grads chunk=0\n  reduce-grads\n  optimizer-step\n") < 0,
        "reduce twice");
  CHECK_MSG("rank 0, instruction 4 'reduce-grads'", "already reduced at instruction 3");
  /* load on a middle rank */
  CHECK(parse_and_validate("schedule pp=3 vpp=1 microbatches=1\nrank 0\nrank 1\n  load mb=0\n"
                           "rank 2\n") < 0,
        "load on a middle rank");
  CHECK_MSG("rank 1, instruction 0 'load mb=0'", "neither the first");
}

/* Schedules built in code can hold values the parser never produces. */
static void test_fields_from_code(void) {
  loom_schedule s;
  CHECK(loom_sched_generate(&s, "1f1b", 2, 1, 2) == 0, "%s", loom_errmsg());
  loom_instr keep = s.instr[0][1];
  s.instr[0][1].chunk = 3;
  CHECK(loom_sched_validate(&s) < 0, "chunk out of range");
  CHECK_MSG("rank 0, instruction 1 'forward chunk=3 mb=0'", "chunk=3 is out of range");
  s.instr[0][1] = keep;
  s.instr[0][1].mb = -1;
  CHECK(loom_sched_validate(&s) < 0, "mb -1");
  CHECK_MSG("rank 0, instruction 1", "mb=-1 is out of range");
  s.instr[0][1] = keep;
  s.instr[0][2].peer = 7;
  CHECK(loom_sched_validate(&s) < 0, "peer 7");
  CHECK_MSG("rank 0, instruction 2 'send-act chunk=0 mb=0 to=7'", "to=7 is out of range");
  s.instr[0][2].peer = 1;
  s.instr[0][1].peer = 1;
  CHECK(loom_sched_validate(&s) < 0, "forward with a peer");
  CHECK_MSG("rank 0, instruction 1", "takes no peer");
  s.instr[0][1] = keep;
  s.instr[0][1].kind = LOOM_INSTR_COUNT;
  CHECK(loom_sched_validate(&s) < 0, "bad kind");
  CHECK_MSG("rank 0, instruction 1", "unknown instruction kind");
  s.instr[0][1] = keep;
  CHECK(loom_sched_validate(&s) == 0, "restored: %s", loom_errmsg());
  CHECK(loom_sched_bubble_fraction(&s, 1, 2) >= 0, "bubble of a valid schedule");
  s.instr[0][1].kind = LOOM_INSTR_BACKWARD;
  CHECK(loom_sched_bubble_fraction(&s, 1, 2) < 0, "bubble validates first");
  loom_sched_free(&s);
  loom_schedule empty = {0};
  CHECK(loom_sched_validate(&empty) < 0, "empty schedule");
  CHECK_MSG("pp = 0");
}

/* A fixture written by hand: comments, split backward, per-chunk reduce, gather-params. */
static void test_custom_fixture(void) {
  loom_schedule s;
  CHECK(loom_sched_load(&s, fixture("custom_zb.txt")) == 0, "%s", loom_errmsg());
  CHECK(loom_sched_validate(&s) == 0, "custom_zb.txt: %s", loom_errmsg());
  loom_sched_free(&s);
  CHECK(loom_sched_load(&s, fixture("bad_deadlock.txt")) == 0, "%s", loom_errmsg());
  CHECK(loom_sched_validate(&s) < 0, "bad_deadlock.txt validates");
  CHECK_MSG("deadlock", "rank 0, instruction", "rank 1, instruction");
  loom_sched_free(&s);
}

int main(void) {
  test_base_is_valid();
  test_unmatched_send();
  test_recv_without_send();
  test_backward_before_forward();
  test_missing_backward();
  test_duplicate_forward();
  test_deadlock();
  test_wrong_peer();
  test_recv_act_first_stage();
  test_order_rules();
  test_fields_from_code();
  test_custom_fixture();
  return harness_finish("test_sched_invalid");
}
