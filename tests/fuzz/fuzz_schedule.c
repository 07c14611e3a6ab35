/* Fuzz harness: pipeline schedules in the text form (`loom sched validate FILE`,
 * parallel.schedule_file): the line parser, then the validator (dependencies, send/recv
 * matching, deadlock search) on whatever parses, and the metrics of a valid schedule.
 * Invariant beyond memory safety: a schedule that parses writes (loom_sched_to_text) text
 * that parses back into the identical schedule. */
#include "fuzz_util.h"
#include "loom/core.h"
#include "loom/sched.h"

static int same(const loom_schedule *a, const loom_schedule *b) {
  if (strcmp(a->name, b->name) || a->pp != b->pp || a->vpp != b->vpp ||
      a->microbatches != b->microbatches)
    return 0;
  for (int r = 0; r < a->pp; r++) {
    if (a->count[r] != b->count[r]) return 0;
    for (int i = 0; i < a->count[r]; i++)
      if (memcmp(&a->instr[r][i], &b->instr[r][i], sizeof a->instr[r][i])) return 0;
  }
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_input_string(data, size);
  loom_schedule s, back;
  if (loom_sched_parse(&s, text, "fuzz.txt") == 0) {
    char *out = loom_sched_to_text(&s);
    if (loom_sched_parse(&back, out, "written.txt"))
      FUZZ_FINDING("a parsed schedule writes text that does not parse: %s\n%s", loom_errmsg(), out);
    if (!same(&s, &back)) FUZZ_FINDING("the written schedule parses back different:\n%s", out);
    loom_sched_free(&back);
    free(out);
    if (loom_sched_validate(&s) == 0)
      for (int r = 0; r < s.pp; r++)
        if (loom_sched_peak_inflight(&s, r) < 0) FUZZ_FINDING("rank %d: negative in-flight peak", r);
    loom_sched_free(&s);
  }
  loom_err_clear();
  free(text);
  return 0;
}
