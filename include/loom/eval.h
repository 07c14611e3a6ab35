/* Evaluation of a trained model on held-out data. */
#ifndef LOOM_EVAL_H
#define LOOM_EVAL_H
#include "loom/config.h"
#include "loom/exec.h"
#include "loom/mesh.h"

/* Answer accuracy (teacher-forced exact match of every answer token) of a vision-language
 * model over up to max_batches micro-batches (0: one epoch) of `split` of data.vqa_path
 * (the executor must run whole logits rows: text decoder only data parallel; see
 * src/train/eval_final.c for any layout), overall and by question kind: the "type" of each
 * sample's json part (the synthetic set writes colour, shape, count, position); samples
 * without one are counted in the overall figures only. Where data.vqa_path holds a synth_vqa.json (`loom data
 * synth-vqa`), its val majority-answer baselines and question-only prior come along. */
#define LOOM_EVAL_MAX_KINDS 8
typedef struct {
  double accuracy;
  long samples, correct;
  double baseline, prior; /* overall majority baseline and question prior; -1: unknown */
  int n_kinds;
  char kind[LOOM_EVAL_MAX_KINDS][16];
  long kind_samples[LOOM_EVAL_MAX_KINDS], kind_correct[LOOM_EVAL_MAX_KINDS];
  double kind_baseline[LOOM_EVAL_MAX_KINDS]; /* -1: unknown */
} loom_eval_vqa_result;
int loom_eval_vqa_detail(loom_executor *ex, const loom_config *cfg, const loom_mesh *m,
                         const char *split, long max_batches, loom_eval_vqa_result *res);
/* "answer accuracy by question type (majority baseline): colour 95.0% of 100 (20.0%), ..."
 * into buf ("" when the result has no kinds). */
void loom_eval_vqa_kinds_line(const loom_eval_vqa_result *res, char *buf, size_t cap);
#endif
