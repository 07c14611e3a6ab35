/* Periodic validation of a training run: after every training.eval_every steps (never twice
 * for one step) and after the last step, the evaluator scores the fixed validation batches;
 * the figures go to the progress output and train.log, to metrics.jsonl as a line of their
 * own at that step, and (last and lowest) to summary.json, from which the run registry
 * takes final_valid_loss, final_valid_perplexity and min_valid_loss. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "loom/runs.h"
#include "train/eval_track.h"

int loom_eval_track_open(loom_eval_track *t, const loom_config *cfg, const loom_model_spec *spec,
                         loom_executor *ex, const loom_mesh *m) {
  memset(t, 0, sizeof *t);
  t->every = cfg->training.eval_every;
  t->min_loss = INFINITY;
  t->last_step = -1;
  return loom_evaluator_open(&t->ev, cfg, spec, ex, m);
}

int loom_eval_track_resume(loom_eval_track *t, const char *metrics_path) {
  if (!t->ev || !loom_path_exists(metrics_path)) return 0;
  loom_series s;
  if (loom_series_read(metrics_path, "val_loss", "step", &s)) {
    loom_err_clear(); /* no evaluation before the checkpoint: nothing to carry over */
    return 0;
  }
  for (int i = 0; i < s.n; i++)
    if (s.y[i] < t->min_loss) t->min_loss = s.y[i];
  loom_series_free(&s);
  return 0;
}

void loom_eval_track_note(const loom_eval_track *t, loom_progress *p) {
  if (!t->ev) return;
  if (t->every > 0)
    loom_progress_note(p, "validation: %s; every %ld steps and at the end",
                       loom_evaluator_describe(t->ev), t->every);
  else
    loom_progress_note(p, "validation: %s; at the end", loom_evaluator_describe(t->ev));
}

bool loom_eval_track_due(const loom_eval_track *t, long step, long total_steps) {
  return t->ev && (step >= total_steps || (t->every > 0 && step % t->every == 0));
}

/* a JSON number, or null for NaN/inf */
static const char *num(char *buf, size_t n, double x) {
  if (isfinite(x)) snprintf(buf, n, "%.17g", x);
  else snprintf(buf, n, "null");
  return buf;
}

int loom_eval_track_run(loom_eval_track *t, const loom_comm *job, long step, FILE *metrics,
                        const char *metrics_path, loom_progress *p) {
  loom_eval_loss_result r;
  if (loom_evaluator_run(t->ev, job, &r)) return loom_err_prefix("validation at step %ld: ", step);
  t->last = r;
  t->last_step = step;
  t->evals++;
  if (r.loss < t->min_loss) t->min_loss = r.loss;
  p->has_val = true; /* the step lines that follow show it */
  p->val_loss = r.loss;
  loom_progress_note(p, "step %ld: val loss %.6f, perplexity %.4f (%.0f tokens, %ld batch%s, "
                     "%.2f s)", step, r.loss, r.perplexity, r.tokens, r.batches,
                     r.batches == 1 ? "" : "es", r.seconds);
  if (!metrics) return 0;
  char a[32], b[32], line[256];
  int n = snprintf(line, sizeof line, "{\"step\": %ld, \"val_loss\": %s, \"val_perplexity\": %s, "
                   "\"val_tokens\": %.0f, \"val_time\": %.6f}\n", step, num(a, sizeof a, r.loss),
                   num(b, sizeof b, r.perplexity), r.tokens, r.seconds);
  return loom_append_checked(metrics, metrics_path, line, (size_t)n); /* a full disk stops the run */
}

void loom_eval_track_summary(const loom_eval_track *t, char *buf, size_t cap) {
  buf[0] = 0;
  if (!t->evals) return;
  char a[32], b[32], c[32];
  snprintf(buf, cap,
           ",\n  \"final_valid_loss\": %s,\n  \"final_valid_perplexity\": %s,\n"
           "  \"min_valid_loss\": %s,\n  \"valid_tokens\": %.0f",
           num(a, sizeof a, t->last.loss), num(b, sizeof b, t->last.perplexity),
           num(c, sizeof c, t->min_loss), t->last.tokens);
}

void loom_eval_track_free(loom_eval_track *t) {
  loom_evaluator_free(t->ev);
  t->ev = NULL;
}
