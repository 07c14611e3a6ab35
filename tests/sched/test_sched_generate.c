/* Schedule generators over pp 1..8, microbatches 1..16, vpp 1..4 (where each generator
 * applies): every schedule validates, runs each (chunk, mb) forward and backward exactly once
 * on every rank, round-trips through the text form, has the closed-form bubble and the
 * expected peak of in-flight micro-batches. Plus the exact order of small cases and the
 * generators' argument errors. */
#include "sched_test_util.h"

/* Count forwards/backwards per (chunk, mb) on every rank: each exactly once. */
static int each_once(const loom_schedule *s) {
  int units = s->vpp * s->microbatches, ok = 1;
  int *fwd = malloc((size_t)units * sizeof *fwd), *bwd = malloc((size_t)units * sizeof *bwd);
  for (int r = 0; r < s->pp; r++) {
    memset(fwd, 0, (size_t)units * sizeof *fwd);
    memset(bwd, 0, (size_t)units * sizeof *bwd);
    for (int i = 0; i < s->count[r]; i++) {
      const loom_instr *in = &s->instr[r][i];
      if (in->kind == LOOM_INSTR_FORWARD) fwd[in->chunk * s->microbatches + in->mb]++;
      if (in->kind == LOOM_INSTR_BACKWARD) bwd[in->chunk * s->microbatches + in->mb]++;
    }
    for (int u = 0; u < units; u++) ok &= fwd[u] == 1 && bwd[u] == 1;
  }
  free(fwd);
  free(bwd);
  return ok;
}

/* to_text, parse, to_text: same text and same lists. */
static int round_trips(const loom_schedule *s) {
  char *text = loom_sched_to_text(s);
  loom_schedule back;
  if (loom_sched_parse(&back, text, "roundtrip.txt")) {
    fprintf(stderr, "  parse: %s\n", loom_errmsg());
    free(text);
    return 0;
  }
  char *again = loom_sched_to_text(&back);
  int ok = !strcmp(text, again) && !strcmp(back.name, s->name) && back.pp == s->pp &&
           back.vpp == s->vpp && back.microbatches == s->microbatches;
  for (int r = 0; ok && r < s->pp; r++)
    ok = back.count[r] == s->count[r] &&
         !memcmp(back.instr[r], s->instr[r], (size_t)s->count[r] * sizeof(loom_instr));
  free(text);
  free(again);
  loom_sched_free(&back);
  return ok;
}

static double closed_form_bubble(const char *name, int pp, int vpp, int m) {
  if (!strcmp(name, "none")) return 0;
  if (strcmp(name, "interleaved")) return (double)(pp - 1) / m;
  if (m >= pp) return (double)(pp - 1) / ((double)vpp * m);
  return ((pp - 1) + (double)(pp - m) * (vpp - 1)) / ((double)vpp * m); /* one short group */
}

static int expected_peak(const char *name, int pp, int vpp, int m, int r) {
  if (!strcmp(name, "none")) return vpp;
  if (!strcmp(name, "gpipe")) return m;
  if (!strcmp(name, "1f1b")) return pp - r < m ? pp - r : m;
  /* interleaved with m % pp == 0: warmup w = (pp-r-1)*2 + (vpp-1)*pp, then one more */
  int w = (pp - r - 1) * 2 + (vpp - 1) * pp, total = vpp * m;
  return w + 1 < total ? w + 1 : total;
}

static void test_grid(void) {
  static const char *const names[] = {"none", "gpipe", "1f1b", "interleaved"};
  int checked = 0, bad = 0;
  for (int n = 0; n < 4; n++)
    for (int pp = 1; pp <= 8; pp++)
      for (int vpp = 1; vpp <= 4; vpp++)
        for (int m = 1; m <= 16; m++) {
          const char *name = names[n];
          int valid = n == 0 ? pp == 1 : n == 3 ? vpp >= 2 : vpp == 1;
          if (!valid) continue;
          loom_schedule s;
          if (loom_sched_generate(&s, name, pp, vpp, m)) {
            CHECK(0, "%s pp=%d vpp=%d m=%d: %s", name, pp, vpp, m, loom_errmsg());
            continue;
          }
          int before = harness_failed;
          CHECK(loom_sched_validate(&s) == 0, "%s pp=%d vpp=%d m=%d: %s", name, pp, vpp, m,
                loom_errmsg());
          CHECK(!strcmp(s.name, name), "name %s", s.name);
          CHECK(each_once(&s), "%s pp=%d vpp=%d m=%d: a forward/backward is not once", name, pp,
                vpp, m);
          CHECK(round_trips(&s), "%s pp=%d vpp=%d m=%d: text round trip differs", name, pp, vpp,
                m);
          double b = loom_sched_bubble_fraction(&s, 1, 2);
          double want = closed_form_bubble(name, pp, vpp, m);
          CHECK(fabs(b - want) < 1e-12, "%s pp=%d vpp=%d m=%d: bubble %.6f, closed form %.6f",
                name, pp, vpp, m, b, want);
          if (strcmp(name, "interleaved") || m % pp == 0)
            for (int r = 0; r < pp; r++) {
              int peak = loom_sched_peak_inflight(&s, r), w = expected_peak(name, pp, vpp, m, r);
              CHECK(peak == w, "%s pp=%d vpp=%d m=%d rank %d: peak in-flight %d, want %d", name,
                    pp, vpp, m, r, peak, w);
            }
          bad += harness_failed > before;
          checked++;
          loom_sched_free(&s);
        }
  CHECK(checked == 16 * 4 + 2 * 8 * 16 + 8 * 3 * 16, "schedules checked: %d", checked);
  CHECK(bad == 0, "%d schedules failed a check", bad);
}

/* F/B order of one rank as "F0 F1 B0 ..." (with ".chunk" when vpp > 1). */
static char *order(const loom_schedule *s, int r) {
  static char buf[4096];
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < s->count[r]; i++) {
    const loom_instr *in = &s->instr[r][i];
    if (in->kind != LOOM_INSTR_FORWARD && in->kind != LOOM_INSTR_BACKWARD) continue;
    len += (size_t)snprintf(buf + len, sizeof buf - len, s->vpp > 1 ? "%s%c%d.%d" : "%s%c%d",
                            len ? " " : "", in->kind == LOOM_INSTR_FORWARD ? 'F' : 'B', in->mb,
                            in->chunk);
  }
  return buf;
}

static void check_order(const char *name, int pp, int vpp, int m, const char *const *want) {
  loom_schedule s;
  CHECK(loom_sched_generate(&s, name, pp, vpp, m) == 0, "%s", loom_errmsg());
  for (int r = 0; r < pp; r++)
    CHECK(!strcmp(order(&s, r), want[r]), "%s pp=%d vpp=%d m=%d rank %d:\n  got  %s\n  want %s",
          name, pp, vpp, m, r, order(&s, r), want[r]);
  loom_sched_free(&s);
}

static void test_known_orders(void) {
  const char *gpipe[] = {"F0 F1 F2 B2 B1 B0", "F0 F1 F2 B2 B1 B0"};
  check_order("gpipe", 2, 1, 3, gpipe);
  const char *f1b[] = {"F0 F1 F2 B0 F3 B1 F4 B2 B3 B4", "F0 F1 B0 F2 B1 F3 B2 F4 B3 B4",
                       "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4"};
  check_order("1f1b", 3, 1, 5, f1b);
  const char *f1b_short[] = {"F0 F1 B0 B1", "F0 F1 B0 B1", "F0 B0 F1 B1"};
  check_order("1f1b", 3, 1, 2, f1b_short); /* m < pp: warmup capped at m */
  /* Megatron's interleaved table for pp=2, vpp=2, m=4: forwards (mb.chunk) 0.0 1.0 0.1 1.1
   * 2.0 3.0 2.1 3.1; backwards mirror the chunk. Warmup 4 on rank 0, 2 on rank 1. */
  const char *inter[] = {
      "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0",
      "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0"};
  check_order("interleaved", 2, 2, 4, inter);
  const char *none[] = {"F0.0 F0.1 B0.1 B0.0 F1.0 F1.1 B1.1 B1.0"};
  check_order("none", 1, 2, 2, none);
}

/* The exact text of a small 1F1B schedule (loads, sends and receives included). */
static void test_golden_text(void) {
  loom_schedule s;
  CHECK(loom_sched_generate(&s, "1f1b", 2, 1, 2) == 0, "%s", loom_errmsg());
  char *text = loom_sched_to_text(&s);
  char *want = NULL;
  CHECK(loom_read_file(fixture("1f1b_pp2_m2.txt"), &want, NULL) == 0, "%s", loom_errmsg());
  CHECK(want && !strcmp(text, want), "1f1b pp=2 m=2:\n%s\nwant:\n%s", text, want ? want : "");
  free(text);
  free(want);
  loom_sched_free(&s);
}

static void test_bad_arguments(void) {
  loom_schedule s;
  CHECK(loom_sched_generate(&s, "none", 2, 1, 4) < 0, "none with pp=2");
  CHECK_MSG("'none'", "pp = 1", "pp = 2");
  CHECK(loom_sched_generate(&s, "gpipe", 2, 2, 4) < 0, "gpipe with vpp=2");
  CHECK_MSG("gpipe", "vpp = 2", "interleaved");
  CHECK(loom_sched_generate(&s, "interleaved", 4, 1, 8) < 0, "interleaved with vpp=1");
  CHECK_MSG("interleaved", "vpp = 1", ">= 2");
  CHECK(loom_sched_generate(&s, "zb-h1", 4, 1, 8) < 0, "unknown name");
  CHECK_MSG("unknown schedule 'zb-h1'", "1f1b");
  CHECK(loom_sched_generate(&s, "1f1b", 0, 1, 8) < 0, "pp=0");
  CHECK_MSG("pp = 0", "out of range");
  CHECK(loom_sched_generate(&s, "1f1b", 4, 1, 0) < 0, "microbatches=0");
  CHECK_MSG("microbatches = 0");
  CHECK(loom_sched_generate(&s, "interleaved", 4096, 256, 64) < 0, "too large");
  CHECK_MSG("pp * vpp * microbatches", "4096");
  CHECK(s.count == NULL && s.instr == NULL, "failed generate leaves the schedule empty");
  loom_sched_free(&s); /* safe on an empty schedule */
}

/* Interleaved with m not a multiple of pp is supported (Megatron's group-size rule). */
static void test_interleaved_remainders(void) {
  for (int pp = 2; pp <= 8; pp++)
    for (int m = pp + 1; m <= 40; m++) {
      if (m % pp == 0) continue;
      loom_schedule s;
      CHECK(loom_sched_generate(&s, "interleaved", pp, 3, m) == 0, "%s", loom_errmsg());
      CHECK(loom_sched_validate(&s) == 0, "pp=%d m=%d: %s", pp, m, loom_errmsg());
      double b = loom_sched_bubble_fraction(&s, 1, 2);
      CHECK(fabs(b - (pp - 1) / (3.0 * m)) < 1e-12, "pp=%d m=%d: bubble %.6f", pp, m, b);
      loom_sched_free(&s);
    }
}

/* Bubble under other costs: GPipe's (pp-1)/m holds for any t_fwd, t_bwd. */
static void test_bubble_costs(void) {
  loom_schedule s;
  CHECK(loom_sched_generate(&s, "gpipe", 4, 1, 6) == 0, "%s", loom_errmsg());
  CHECK_CLOSE(loom_sched_bubble_fraction(&s, 1, 1), 3.0 / 6, 1e-12, "gpipe t_b = t_f");
  CHECK_CLOSE(loom_sched_bubble_fraction(&s, 0.5, 3), 3.0 / 6, 1e-12, "gpipe t_b = 6 t_f");
  CHECK(loom_sched_bubble_fraction(&s, 0, 1) < 0, "zero cost rejected");
  CHECK_MSG("t_fwd = 0");
  CHECK(loom_sched_peak_inflight(&s, 4) < 0, "rank out of range");
  CHECK_MSG("rank 4", "0..3");
  loom_sched_free(&s);
}

static void test_grid_text(void) {
  loom_schedule s;
  CHECK(loom_sched_generate(&s, "1f1b", 2, 1, 2) == 0, "%s", loom_errmsg());
  char *grid = loom_sched_to_grid(&s);
  CHECK(grid && strstr(grid, "rank 0 | F0 F1 .  .  B0 B0 .  B1 B1\n") &&
            strstr(grid, "rank 1 | .  F0 B0 B0 F1 B1 B1 .  .\n"),
        "grid:\n%s", grid ? grid : loom_errmsg());
  free(grid);
  loom_sched_free(&s);
  CHECK(loom_sched_generate(&s, "interleaved", 2, 2, 2) == 0, "%s", loom_errmsg());
  grid = loom_sched_to_grid(&s);
  CHECK(grid && strstr(grid, "rank 0 | F0.0 F1.0 F0.1"), "interleaved grid:\n%s",
        grid ? grid : loom_errmsg());
  free(grid);
  loom_sched_free(&s);
}

/* Timed replay: forward, backward, reduce-grads and the optimizer step take 1 each, the rest
 * nothing; a recv ends when its data arrives. 1F1B on 2 ranks, one micro-batch, by hand: rank 1
 * runs F 1-2, B 2-3 and reduce-grads 3-4; rank 0 runs F 0-1, waits for the gradient until 3,
 * then B 3-4 and reduce-grads 4-5. The optimizer steps are a barrier (the executor all-reduces
 * the gradient norm over every rank first): both start at 5, where rank 1 alone would start
 * at 4, and the step ends at 6. */
static double opt_start[2];
static void unit_cost(void *ctx, int r, int i, const loom_instr *in, loom_sched_timing *t) {
  (void)ctx, (void)i;
  bool unit = in->kind == LOOM_INSTR_FORWARD || in->kind == LOOM_INSTR_BACKWARD ||
              in->kind == LOOM_INSTR_REDUCE_GRADS || in->kind == LOOM_INSTR_OPTIMIZER_STEP;
  bool recv = in->kind == LOOM_INSTR_RECV_ACT || in->kind == LOOM_INSTR_RECV_GRAD;
  double start = recv && t->arrival > t->start ? t->arrival : t->start;
  if (in->kind == LOOM_INSTR_OPTIMIZER_STEP && r < 2) opt_start[r] = start;
  t->end = t->ready = start + (unit ? 1 : 0);
}

static void test_optimizer_barrier(void) {
  loom_schedule s;
  CHECK(loom_sched_generate(&s, "1f1b", 2, 1, 1) == 0, "%s", loom_errmsg());
  double makespan = -1;
  opt_start[0] = opt_start[1] = -1;
  CHECK(loom_sched_replay_timed(&s, unit_cost, NULL, &makespan) == 0, "%s", loom_errmsg());
  CHECK(opt_start[0] == 5 && opt_start[1] == 5 && makespan == 6,
        "optimizer steps start at %g and %g (want 5 and 5), makespan %g (want 6)", opt_start[0],
        opt_start[1], makespan);
  loom_sched_free(&s);
}

int main(void) {
  test_grid();
  test_known_orders();
  test_golden_text();
  test_bad_arguments();
  test_interleaved_remainders();
  test_bubble_costs();
  test_grid_text();
  test_optimizer_barrier();
  return harness_finish("test_sched_generate");
}
