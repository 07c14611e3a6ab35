/* Progress line and train.log writer. A closed stderr stops the printing, never the run. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loom/core.h"
#include "loom/hw.h"
#include "train/progress.h"

static void fmt_eta(char *buf, size_t n, double s) {
  if (s < 0 || s > 1e7) {
    snprintf(buf, n, "--:--");
    return;
  }
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, n, "%02ld:%02ld", t / 60, t % 60);
}

static void timestamp(char *buf, size_t n) {
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
}

/* stderr closed under us (`loom train ... 2>&1 | head`: EPIPE, SIGPIPE being ignored): stop
 * printing; train.log goes on. */
static void stop_if_closed(loom_progress *p) {
  if (fflush(stderr) == 0 && !ferror(stderr)) return;
  p->quiet = true;
  clearerr(stderr);
}

void loom_progress_log_line(loom_progress *p, const char *line) {
  if (!p->log) return;
  char ts[32];
  timestamp(ts, sizeof ts);
  char *text = loom_sprintf("[%s] %s\n", ts, line);
  char *pending = loom_strdup(loom_errmsg()); /* the caller's error, kept */
  if (loom_append_checked(p->log, p->log_path, text, strlen(text))) {
    snprintf(p->log_error, sizeof p->log_error, "%s", loom_errmsg());
    loom_err("%s", pending);
    fclose(p->log); /* no more lines: the file ends in the last whole one */
    p->log = NULL;
  }
  free(pending);
  free(text);
}

void loom_progress_step(loom_progress *p, long step, const loom_step_result *r,
                        double step_seconds, double elapsed, double remaining_seconds) {
  p->win_tokens += (double)r->tokens; /* tok/s: the average since the last logged line */
  p->win_seconds += step_seconds;
  double tps = p->win_seconds > 0 ? p->win_tokens / p->win_seconds : 0;
  double mfu = loom_mfu(p->win_tokens, p->win_seconds, p->flops_per_token, p->peak_flops);
  if (mfu > 1 && !p->mfu_refused) { /* beyond the physical bound: the peak is not this run's */
    p->mfu_refused = true;
    loom_progress_note(p, "MFU not shown: the achieved %.3g GFLOP/s per rank exceed the profile's "
                       "peak of %.3g (%s; measured with fewer threads or another GEMM backend "
                       "than this run uses?); run 'loom bench' again as training runs",
                       tps * p->flops_per_token / 1e9, p->peak_flops / 1e9,
                       p->peak_name[0] ? p->peak_name : "its matrix peak");
  }
  char mfu_text[32] = "";
  if (isfinite(mfu) && !p->mfu_refused) snprintf(mfu_text, sizeof mfu_text, " | MFU %.1f%%", 100 * mfu);
  char eta[32];
  fmt_eta(eta, sizeof eta, remaining_seconds);
  char line[288], val[40] = "";
  if (p->has_val) snprintf(val, sizeof val, " | val loss %.4f", p->val_loss);
  snprintf(line, sizeof line,
           "step %*ld/%ld | loss %.4f%s | lr %.3e | grad norm %.3f | %.0f tok/s%s | ETA %s",
           (int)snprintf(NULL, 0, "%ld", p->total_steps), step, p->total_steps, r->loss, val,
           r->lr, r->grad_norm, tps, mfu_text, eta);
  bool due = step % p->log_every == 0 || step == p->total_steps || step == 1;
  if (due) p->win_tokens = p->win_seconds = 0;
  if (due && p->log) {
    char text[320];
    snprintf(text, sizeof text, "%s (%.1f s)", line, elapsed);
    loom_progress_log_line(p, text);
  }
  if (p->quiet) return;
  if (p->tty) {
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
  } else if (due) {
    fprintf(stderr, "%s\n", line);
  }
  stop_if_closed(p);
}

void loom_progress_finish(loom_progress *p) {
  if (p->tty && !p->quiet) fputc('\n', stderr);
}

void loom_progress_note(loom_progress *p, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  loom_progress_log_line(p, msg);
  if (p->quiet) return;
  if (p->tty) fputs("\r\033[K", stderr); /* over the live step line, redrawn at the next step */
  fprintf(stderr, "%s\n", msg);
  stop_if_closed(p);
}
