/* training.skip_steps: the steps a run reads the batches of without training on them (getting
 * past a loss spike, as Megatron-LM's --skip-train-iteration-range), written "100-110,300-400"
 * or "100-110 300-400" (a comma on the command line is Hydra's sweep: quote the value, or use
 * spaces): steps N or inclusive ranges A-B (1 <= A <= B), in any order, without overlaps. Parsed here once for validation (errors name the item) and for the trainer. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "loom/config.h"
#include "loom/core.h"

/* One step number at *p (digits only), advancing *p; -1 when there is none or it is too big. */
static long step_number(const char **p) {
  if (!isdigit((unsigned char)**p)) return -1;
  errno = 0;
  char *end;
  long v = strtol(*p, &end, 10);
  if (errno) return -1;
  *p = end;
  return v;
}

static int by_first(const void *a, const void *b) {
  long x = ((const loom_step_range *)a)->first, y = ((const loom_step_range *)b)->first;
  return (x > y) - (x < y);
}

/* "A-B" (or "N") at text[0..len): the range, or an error naming it. */
static int parse_item(const char *text, size_t len, loom_step_range *out) {
  char *item = loom_strndup(text, len);
  const char *p = item;
  long a = step_number(&p), b = a;
  if (a >= 0 && *p == '-') {
    p++;
    b = step_number(&p);
  }
  int rc = 0;
  if (a < 0 || b < 0 || *p)
    rc = loom_err("training.skip_steps: '%s' is not a step or a range of steps (write them as "
                  "\"100-110,300-400\" or \"100-110 300-400\": steps N or inclusive ranges A-B)",
                  item);
  else if (a < 1)
    rc = loom_err("training.skip_steps: '%s': steps count from 1", item);
  else if (b < a)
    rc = loom_err("training.skip_steps: '%s' ends before it starts (write %ld-%ld)", item, b, a);
  *out = (loom_step_range){a, b};
  free(item);
  return rc;
}

int loom_skip_steps_parse(const char *text, loom_skip_steps *out) {
  memset(out, 0, sizeof *out);
  static const char sep[] = ", \t";
  int rc = 0;
  for (const char *p = text + strspn(text, sep); *p && !rc; p += strspn(p, sep)) {
    size_t len = strcspn(p, sep);
    out->r = loom_realloc(out->r, (size_t)out->n + 1, sizeof *out->r);
    rc = parse_item(p, len, &out->r[out->n]);
    if (!rc) out->n++;
    p += len;
  }
  if (!rc && out->n > 1) qsort(out->r, (size_t)out->n, sizeof *out->r, by_first);
  for (int i = 1; i < out->n && !rc; i++)
    if (out->r[i].first <= out->r[i - 1].last)
      rc = loom_err("training.skip_steps: %ld-%ld and %ld-%ld overlap; give each step once",
                    out->r[i - 1].first, out->r[i - 1].last, out->r[i].first, out->r[i].last);
  if (rc) loom_skip_steps_free(out);
  return rc;
}

void loom_skip_steps_free(loom_skip_steps *s) {
  free(s->r);
  memset(s, 0, sizeof *s);
}

bool loom_skip_steps_has(const loom_skip_steps *s, long step) {
  for (int i = 0; i < s->n; i++)
    if (step >= s->r[i].first && step <= s->r[i].last) return true;
  return false;
}

long loom_skip_steps_count(const loom_skip_steps *s, long upto) {
  long n = 0;
  for (int i = 0; i < s->n && s->r[i].first <= upto; i++)
    n += (s->r[i].last < upto ? s->r[i].last : upto) - s->r[i].first + 1;
  return n;
}

bool loom_skip_steps_same_upto(const loom_skip_steps *a, const loom_skip_steps *b, long upto) {
  for (long step = 1, i = 0, j = 0; step <= upto;) { /* walk both lists' boundaries */
    while (i < a->n && a->r[i].last < step) i++;
    while (j < b->n && b->r[j].last < step) j++;
    bool in_a = i < a->n && a->r[i].first <= step, in_b = j < b->n && b->r[j].first <= step;
    if (in_a != in_b) return false;
    long next = upto + 1; /* the next step where membership may change */
    if (i < a->n) next = in_a ? a->r[i].last + 1 : a->r[i].first;
    if (j < b->n) {
      long nb = in_b ? b->r[j].last + 1 : b->r[j].first;
      if (nb < next) next = nb;
    }
    step = next;
  }
  return true;
}
