/* Answer accuracy of a vision-language model on a split of its VQA data: a sample counts as
 * correct when the model's most likely next token (teacher forcing, real vocabulary only)
 * equals the target at every answer position of the sample. */
#include <math.h>
#include <stdlib.h>

#include "loom/eval.h"
#include "loom/vqa.h"

int loom_eval_vqa(loom_executor *ex, const loom_config *cfg, const loom_mesh *m,
                  const char *split, long max_batches, double *accuracy, long *samples) {
  loom_decoder *d = loom_exec_decoder(ex);
  if (m->pp > 1 || m->tp > 1 || m->sp > 1)
    return loom_err("answer accuracy is computed with pp = tp = sp = 1 for now");
  loom_tokenizer *tok;
  if (loom_tokenizer_load(&tok, cfg->data.tokenizer)) return LOOM_ERR;
  loom_vqa_options o = {cfg->data.vqa_path, split, tok, (int)cfg->training.seq_len,
                        (int)cfg->training.micro_batch_size, cfg->data.image_min_pixels,
                        cfg->data.image_max_pixels, m->dp_rank, m->dp, (uint64_t)cfg->run.seed,
                        cfg->data.skip_bad_samples};
  loom_vqa_loader *l;
  if (loom_vqa_loader_open(&l, &o)) {
    loom_tokenizer_free(tok);
    return LOOM_ERR;
  }
  long n = (long)loom_vqa_loader_batches_per_epoch(l);
  if (max_batches > 0 && n > max_batches) n = max_batches;
  double counts[2] = {0, 0}; /* correct, samples */
  int rc = 0, V = d->spec.vocab_size, Vl = d->vloc, T = d->T;
  for (long i = 0; i < n && !rc; i++) {
    loom_vqa_batch b;
    if ((rc = loom_vqa_loader_next(l, &b))) break;
    const float *logits = loom_exec_forward_only(ex, b.input_ids, &b);
    for (int r = 0; r < b.B; r++) {
      int answers = 0, right = 0;
      for (int t = 0; t < T; t++) {
        int target = b.targets[r * T + t];
        if (target == LOOM_VQA_IGNORE) continue;
        const float *lg = logits + ((size_t)r * T + t) * Vl;
        int best = 0;
        for (int v = 1; v < V; v++)
          if (lg[v] > lg[best]) best = v;
        answers++;
        right += best == target;
      }
      if (answers == 0) continue;
      counts[1] += 1;
      counts[0] += right == answers;
    }
  }
  loom_vqa_loader_close(l);
  loom_tokenizer_free(tok);
  if (rc) return rc;
  loom_comm_allreduce_f64(&m->dp_comm, counts, 2, LOOM_OP_SUM);
  *accuracy = counts[1] > 0 ? counts[0] / counts[1] : 0;
  *samples = (long)counts[1];
  return 0;
}
