/* loom_sched_to_grid: a per-rank timeline of the compute instructions, replayed with unit
 * costs (forward 1, backward 2, communication 0), one fixed-width cell per unit of time, so
 * the warmup, the steady 1F1B pattern and the bubbles show at a glance. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

static void label(const loom_schedule *s, const loom_instr *in, char *buf, size_t n) {
  static const char letter[LOOM_INSTR_COUNT] = {
      [LOOM_INSTR_FORWARD] = 'F', [LOOM_INSTR_BACKWARD] = 'B',
      [LOOM_INSTR_BACKWARD_INPUT] = 'I', [LOOM_INSTR_BACKWARD_WEIGHT] = 'W'};
  if (s->vpp > 1) snprintf(buf, n, "%c%d.%d", letter[in->kind], in->mb, in->chunk);
  else snprintf(buf, n, "%c%d", letter[in->kind], in->mb);
}

char *loom_sched_to_grid(const loom_schedule *s) {
  if (loom_sched_validate(s)) return NULL;
  sched_links links;
  if (sched_match(s, &links)) return NULL;
  sched_replay_state st = {0};
  st.cost[LOOM_INSTR_FORWARD] = 1;
  st.cost[LOOM_INSTR_BACKWARD] = 2;
  st.cost[LOOM_INSTR_BACKWARD_INPUT] = 1;
  st.cost[LOOM_INSTR_BACKWARD_WEIGHT] = 1;
  st.busy = loom_calloc((size_t)s->pp, sizeof *st.busy);
  st.blocked = loom_calloc((size_t)s->pp, sizeof *st.blocked);
  st.start = loom_calloc((size_t)s->pp, sizeof *st.start);
  for (int r = 0; r < s->pp; r++) {
    st.start[r] = loom_malloc((size_t)(s->count[r] ? s->count[r] : 1) * sizeof **st.start);
  }
  LOOM_ASSERT(!sched_replay(s, &links, &st)); /* validated: no deadlock */
  int cells = (int)lround(st.makespan);
  char lab[32];
  int width = 1;
  for (int r = 0; r < s->pp; r++)
    for (int i = 0; i < s->count[r]; i++)
      if (sched_is_compute(s->instr[r][i].kind)) {
        label(s, &s->instr[r][i], lab, sizeof lab);
        if ((int)strlen(lab) > width) width = (int)strlen(lab);
      }
  sched_text out = {0};
  char head[256];
  snprintf(head, sizeof head,
           "# timeline: one cell per unit of time (forward 1, backward 2, comm 0); F forward, "
           "B backward, I/W backward-input/-weight, then the micro-batch%s; . idle\n",
           s->vpp > 1 ? " and .chunk" : "");
  sched_text_put(&out, head);
  int digits = snprintf(NULL, 0, "%d", s->pp - 1);
  size_t row_len = (size_t)cells * (size_t)(width + 1) + 1;
  char *row = loom_malloc(row_len + 1);
  for (int r = 0; r < s->pp; r++) {
    memset(row, ' ', row_len);
    for (int t = 0; t < cells; t++) row[(size_t)t * (width + 1)] = '.';
    for (int i = 0; i < s->count[r]; i++) {
      const loom_instr *in = &s->instr[r][i];
      if (!sched_is_compute(in->kind)) continue;
      label(s, in, lab, sizeof lab);
      int t0 = (int)lround(st.start[r][i]), d = (int)lround(st.cost[in->kind]);
      for (int t = t0; t < t0 + d && t < cells; t++)
        memcpy(row + (size_t)t * (width + 1), lab, strlen(lab));
    }
    size_t n = row_len;
    while (n > 0 && row[n - 1] == ' ') n--;
    row[n] = 0;
    snprintf(head, sizeof head, "rank %*d | ", digits, r);
    sched_text_put(&out, head);
    sched_text_put(&out, row);
    sched_text_put(&out, "\n");
  }
  free(row);
  for (int r = 0; r < s->pp; r++) free(st.start[r]);
  free(st.start);
  free(st.busy);
  free(st.blocked);
  sched_links_free(s, &links);
  return out.data;
}
