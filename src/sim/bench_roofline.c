/* The roofline table of a profiled step (include/loom/roofline.h): rates and fractions of each
 * part against the compute peak (the instruction peak of the step's dtype, or the library's
 * GEMM peak) or the memory bandwidth measured on this machine, the time lost against the
 * bound, the bottleneck. */
#include "loom/roofline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int is_compute(loom_part p) {
  return (p >= LOOM_PART_QKV_FWD && p <= LOOM_PART_ROUTER_WGRAD) || p == LOOM_PART_ATTN_FWD ||
         p == LOOM_PART_ATTN_BWD || p == LOOM_PART_EXPERTS_FWD || p == LOOM_PART_EXPERTS_BWD;
}

static int by_time(const void *a, const void *b) {
  double x = ((const loom_roofline_row *)a)->seconds, y = ((const loom_roofline_row *)b)->seconds;
  return x > y ? -1 : x < y;
}

int loom_roofline_build(const loom_prof_report *r, double gemm_peak, double mem_bw,
                        loom_roofline_row rows[LOOM_PART_N]) {
  int n = 0;
  double total = r->total > 0 ? r->total : 1e-300;
  for (int i = 0; i < LOOM_PART_N; i++) {
    loom_part p = (loom_part)i;
    if (r->calls[p] == 0) continue;
    loom_roofline_row *w = &rows[n++];
    *w = (loom_roofline_row){p, r->seconds[p], r->seconds[p] / total, 0, is_compute(p), 0, NAN,
                             NAN, NULL};
    double bound = w->compute ? gemm_peak : mem_bw;
    w->work = w->compute ? r->flops[p] : r->bytes[p];
    if (p == LOOM_PART_OTHER) { /* no work: all of its time is above any bound */
      w->lost = w->seconds;
      w->note = "no kernel: decoder glue, copies";
      continue;
    }
    if (w->work <= 0 || w->seconds <= 0) {
      w->note = "no work recorded";
      continue;
    }
    w->rate = w->work / w->seconds;
    if (bound <= 0) {
      w->note = w->compute ? "no GEMM peak measured" : "no bandwidth measured";
      continue;
    }
    double f = w->rate / bound;
    if (f > 1.0) { /* faster than its bound: the bound is wrong, not the part */
      w->note = w->compute ? "above the measured peak: peak too low"
                           : "above the measured bandwidth: cache-resident or bound too low";
      continue;
    }
    w->fraction = f;
    w->lost = w->seconds - w->work / bound;
  }
  qsort(rows, (size_t)n, sizeof rows[0], by_time);
  return n;
}

void loom_roofline_print(FILE *f, const loom_prof_report *r, const loom_roofline_row *rows,
                         int n, double gemm_peak, double mem_bw, const char *dtype) {
  char name[64];
  snprintf(name, sizeof name, "%s GEMM peak", dtype);
  loom_roofline_print_bound(f, r, rows, n, gemm_peak, name, mem_bw);
}

void loom_roofline_print_bound(FILE *f, const loom_prof_report *r, const loom_roofline_row *rows,
                               int n, double peak, const char *peak_name, double mem_bw) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += rows[i].seconds;
  fprintf(f,
          "roofline of one step: %.3f s (parts sum to %.3f s); bounds: %s %.1f GFLOP/s, "
          "streaming bandwidth %.2f GB/s\n",
          r->total, sum, peak_name, peak / 1e9, mem_bw / 1e9);
  fprintf(f, "  %-16s %9s %6s %7s %12s %11s %9s %8s  %s\n", "part", "time s", "share", "calls",
          "work", "rate", "of bound", "lost s", "note");
  int worst = -1;
  for (int i = 0; i < n; i++) {
    const loom_roofline_row *w = &rows[i];
    char work[32] = "-", rate[32] = "-", frac[16] = "-", lost[16] = "-";
    if (w->work > 0)
      snprintf(work, sizeof work, w->compute ? "%.2f GFLOP" : "%.3f GB", w->work / 1e9);
    if (w->rate > 0)
      snprintf(rate, sizeof rate, w->compute ? "%.1f GF/s" : "%.2f GB/s", w->rate / 1e9);
    if (!isnan(w->fraction)) snprintf(frac, sizeof frac, "%.1f%%", 100 * w->fraction);
    if (!isnan(w->lost)) snprintf(lost, sizeof lost, "%.4f", w->lost);
    fprintf(f, "  %-16s %9.4f %5.1f%% %7ld %12s %11s %9s %8s  %s\n",
            loom_prof_part_name(w->part), w->seconds, 100 * w->share, r->calls[w->part], work,
            rate, frac, lost, w->note ? w->note : "");
    if (!isnan(w->lost) && (worst < 0 || w->lost > rows[worst].lost)) worst = i;
  }
  if (worst >= 0)
    fprintf(f, "bottleneck: %s loses %.3f s (%.1f%% of the step) against its bound\n",
            loom_prof_part_name(rows[worst].part), rows[worst].lost,
            100 * rows[worst].lost / (r->total > 0 ? r->total : 1));
}

void loom_roofline_json(FILE *f, const loom_roofline_row *rows, int n) {
  fputc('[', f);
  for (int i = 0; i < n; i++) {
    const loom_roofline_row *w = &rows[i];
    fprintf(f, "%s{\"part\": \"%s\", \"seconds\": %.6g, \"share\": %.6g, \"%s\": %.17g, ",
            i ? ", " : "", loom_prof_part_name(w->part), w->seconds, w->share,
            w->compute ? "flops" : "bytes", w->work);
    if (isnan(w->fraction)) fprintf(f, "\"fraction\": null, ");
    else fprintf(f, "\"fraction\": %.6g, ", w->fraction);
    if (isnan(w->lost)) fprintf(f, "\"lost_s\": null, ");
    else fprintf(f, "\"lost_s\": %.6g, ", w->lost);
    fprintf(f, "\"note\": \"%s\"}", w->note ? w->note : "");
  }
  fputc(']', f);
}
