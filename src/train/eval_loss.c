/* Validation loss: the token-mean cross-entropy over a fixed set of validation batches (the
 * first training.eval_batches calls of the validation data's first epoch order, rewound
 * before every evaluation), computed with the executor's forward-only schedule so that every
 * layout — pipelines included — scores the same tokens. The loss is sum of token losses /
 * number of counted targets over all batches and data-parallel ranks (not a mean of batch
 * means); perplexity = exp(loss). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/vision_module.h"
#include "loom/data_source.h"
#include "loom/eval_loss.h"

struct loom_evaluator {
  loom_executor *ex;
  loom_data_source *data;
  long batches;
  int32_t *tokens, *targets; /* (A, B, T) */
  const void **vqa;          /* (A) */
  char describe[LOOM_STR_MAX + 160];
};

int loom_evaluator_open(loom_evaluator **out, const loom_config *cfg, const loom_model_spec *spec,
                        loom_executor *ex, const loom_mesh *m) {
  *out = NULL;
  const loom_config_training *t = &cfg->training;
  loom_vmod *vm = loom_exec_vision(ex);
  int dp_rank = m->member ? m->dp_rank : loom_vmod_mesh(vm)->dp_rank;
  loom_data_source *data;
  if (loom_data_open_val(&data, cfg, spec, dp_rank, m->dp)) return LOOM_ERR;
  if (!data) return 0;
  loom_decoder *dec = loom_exec_decoder(ex); /* packed documents: the same end-of-document */
  int32_t eod = loom_data_doc_eod(data);
  if (dec && dec->doc_eod >= 0 && eod != dec->doc_eod) {
    loom_err("data.pack_documents: the validation data (%s) ends documents with token %d but "
             "the training data with token %d; tokenize both with the same tokenizer",
             loom_data_describe(data), (int)eod, (int)dec->doc_eod);
    loom_data_close(data);
    return LOOM_ERR;
  }
  if (dec) loom_decoder_set_doc_eod(dec, eod);
  long have = (long)loom_data_batches_per_epoch(data);
  long want = t->eval_batches > 0 ? t->eval_batches : have;
  long seqs = t->micro_batch_size * t->grad_accum * m->dp;
  if (want > have || have == 0) {
    char asked[64] = "";
    if (t->eval_batches > 0)
      snprintf(asked, sizeof asked, "training.eval_batches = %ld but ", t->eval_batches);
    loom_err("%sthe validation data (%s) holds %ld whole batch%s of micro_batch_size x "
             "grad_accum x dp = %ld x %ld x %d = %ld sequences of %ld tokens; %s", asked,
             loom_data_describe(data), have, have == 1 ? "" : "es", t->micro_batch_size,
             t->grad_accum, m->dp, seqs, t->seq_len,
             t->eval_batches > 0 ? "lower training.eval_batches (0 = all) or give more "
                                   "validation data"
                                 : "give more validation data or use smaller batches");
    loom_data_close(data);
    return LOOM_ERR;
  }
  loom_evaluator *e = loom_calloc(1, sizeof *e);
  e->ex = ex;
  e->data = data;
  e->batches = want;
  size_t n = (size_t)t->grad_accum * t->micro_batch_size * t->seq_len;
  e->tokens = loom_malloc(n * sizeof(int32_t));
  e->targets = loom_malloc(n * sizeof(int32_t));
  e->vqa = loom_calloc((size_t)t->grad_accum, sizeof *e->vqa);
  snprintf(e->describe, sizeof e->describe, "%s; %ld batch%s of %ld x %ld tokens",
           loom_data_describe(data), want, want == 1 ? "" : "es", seqs, t->seq_len);
  *out = e;
  return 0;
}

int loom_evaluator_run(loom_evaluator *e, const loom_comm *job, loom_eval_loss_result *r) {
  memset(r, 0, sizeof *r);
  double t0 = loom_now();
  loom_comm_stats saved = loom_comm_counters; /* evaluation traffic is not the step's */
  loom_loader_state start = {0, 0};
  int rc = loom_data_set_state(e->data, &start);
  double sum = 0, count = 0;
  bool failed = false;
  loom_failure fail;
  for (long k = 0; k < e->batches; k++) {
    if (!rc) rc = loom_data_next(e->data, e->tokens, e->targets, e->vqa);
    /* data-parallel groups read different samples: a bad one stops every rank here, before
     * the batch's collectives (a rank of the encoder only reads its group's samples too),
     * and every rank reports the reading rank's message */
    if ((failed = loom_comm_agree(job, rc, &fail))) break;
    if (loom_data_is_vqa(e->data)) loom_exec_set_vision_batches(e->ex, e->vqa);
    double s, c;
    loom_exec_eval(e->ex, e->tokens, e->targets, &s, &c);
    sum += s;
    count += c;
  }
  if (failed) {
    loom_comm_counters = saved;
    return job->size > 1 ? loom_err("rank %d: %s", fail.rank, fail.msg) : loom_err("%s", fail.msg);
  }
  /* every rank of the text decoder has the sums; a rank of the encoder only has none: share
   * rank 0's (a text rank) */
  double v[2] = {sum, count};
  loom_comm_bcast_bytes(job, v, sizeof v, 0);
  loom_comm_counters = saved;
  r->tokens = v[1];
  r->loss = v[1] > 0 ? v[0] / v[1] : NAN;
  r->perplexity = exp(r->loss);
  r->batches = e->batches;
  r->seconds = loom_now() - t0;
  if (!(v[1] > 0))
    return loom_err("the validation batches hold no target tokens (every target is ignored); "
                    "nothing to score");
  return 0;
}

const char *loom_evaluator_describe(const loom_evaluator *e) { return e->describe; }

void loom_evaluator_free(loom_evaluator *e) {
  if (!e) return;
  loom_data_close(e->data);
  free(e->tokens);
  free(e->targets);
  free(e->vqa);
  free(e);
}
