/* The roofline table of one training step (`loom bench model --roofline`): each part of the
 * step profiler's report (loom/prof.h) with its time, its work, its rate and the fraction of
 * its bound — the compute peak of the step's dtype for GEMMs and attention (`loom bench model`:
 * the instruction peak of this machine's profile where it has one, else the library's best
 * GEMM), the streaming memory bandwidth for the memory-bound parts — and the time it loses
 * against that bound, so the bottleneck is the part with the most lost time. */
#ifndef LOOM_ROOFLINE_H
#define LOOM_ROOFLINE_H
#include <stdio.h>

#include "loom/prof.h"

typedef struct {
  loom_part part;
  double seconds, share; /* exclusive time, share of the step */
  double work;           /* FLOPs (compute bound) or bytes (memory bound); 0: none */
  int compute;           /* 1: work is FLOPs, bound the GEMM peak; 0: bytes, bandwidth */
  double rate;           /* work / seconds (FLOP/s or B/s); 0 when no work */
  double fraction;       /* rate / bound in [0, 1]; NAN when absent (see note) */
  double lost;           /* seconds - work / bound: time above the bound; NAN when the fraction
                            is absent (unknown), all of it for the unattributed rest */
  const char *note;      /* why the fraction is absent, or NULL */
} loom_roofline_row;

/* Rows of the parts that ran (calls > 0, and the unattributed remainder), largest time first;
 * returns their count. gemm_peak in FLOP/s, mem_bw in B/s (<= 0: not measured -> fractions
 * absent). A rate above its bound gives no fraction but a note: the bound is wrong (as MFU is
 * never printed above 100%). */
int loom_roofline_build(const loom_prof_report *r, double gemm_peak, double mem_bw,
                        loom_roofline_row rows[LOOM_PART_N]);
/* The table, then the bottleneck line: the part losing the most time against its bound (parts
 * without a fraction are not candidates: what they lose is unknown). The compute bound is
 * named "<dtype> GEMM peak". */
void loom_roofline_print(FILE *f, const loom_prof_report *r, const loom_roofline_row *rows,
                         int n, double gemm_peak, double mem_bw, const char *dtype);
/* The same with the compute bound named by the caller ("bf16 AMX tdpbf16ps instruction peak
 * of 2 threads"). */
void loom_roofline_print_bound(FILE *f, const loom_prof_report *r, const loom_roofline_row *rows,
                               int n, double peak, const char *peak_name, double mem_bw);
/* The rows as a JSON array (no trailing newline). */
void loom_roofline_json(FILE *f, const loom_roofline_row *rows, int n);
#endif
