/* loom_sched_to_text: the text form of a schedule (grammar in docs/SCHEDULES.md). The output
 * parses back to the same lists, and printing that again gives the same text. Also the
 * growable text buffer the writers share. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

void sched_text_put(sched_text *b, const char *s) {
  size_t n = strlen(s);
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    char *grown = loom_realloc(b->data, cap, 1);
    b->data = grown;
    b->cap = cap;
  }
  memcpy(b->data + b->len, s, n + 1);
  b->len += n;
}

char *loom_sched_to_text(const loom_schedule *s) {
  sched_text b = {0};
  char line[160];
  sched_text_put(&b, "# loom schedule (text form: docs/SCHEDULES.md)\n");
  const char *name = sched_name_ok(s->name, strnlen(s->name, sizeof s->name)) ? s->name : "custom";
  snprintf(line, sizeof line, "schedule name=%s pp=%d vpp=%d microbatches=%d\n", name, s->pp,
           s->vpp, s->microbatches);
  sched_text_put(&b, line);
  for (int r = 0; r < s->pp; r++) {
    snprintf(line, sizeof line, "rank %d\n", r);
    sched_text_put(&b, line);
    for (int i = 0; i < (s->count ? s->count[r] : 0); i++) {
      sched_text_put(&b, "  ");
      loom_instr_format(&s->instr[r][i], line, sizeof line);
      sched_text_put(&b, line);
      sched_text_put(&b, "\n");
    }
  }
  return b.data;
}
