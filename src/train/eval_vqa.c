/* Answer accuracy of a vision-language model on a split of its VQA data: a sample counts as
 * correct when the model's most likely next token (teacher forcing, real vocabulary only)
 * equals the target at every answer position of the sample. For an Energon-style directory
 * whose samples carry a json "type" (the synthetic set), the accuracy is also broken down by
 * question kind: every rank reads the split's types in index order, so the kind list and the
 * counts reduced over data-parallel ranks line up. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/eval.h"
#include "loom/vqa.h"

typedef struct {
  char *key;
  int kind;
} key_kind;

static int by_key(const void *a, const void *b) {
  return strcmp(((const key_kind *)a)->key, ((const key_kind *)b)->key);
}

/* Kind of every sample of the split (sorted by key), the kind names in res. *n = 0 when the
 * data has no kinds (annotation files, samples without a json "type"). */
static int read_kinds(const loom_config *cfg, const char *split, loom_eval_vqa_result *res,
                      key_kind **out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (!loom_is_dir(cfg->data.vqa_path)) return 0;
  loom_vqa_dataset *d;
  uint64_t bad = 0;
  if (loom_vqa_dataset_open(&d, cfg->data.vqa_path, split, cfg->data.skip_bad_samples, &bad))
    return LOOM_ERR;
  size_t count = loom_vqa_dataset_count(d), k = 0;
  key_kind *map = loom_calloc(count ? count : 1, sizeof *map);
  for (size_t i = 0; i < count; i++) {
    loom_vqa_sample s;
    if (loom_vqa_dataset_get(d, i, &s)) continue; /* bad samples: the loader reports them */
    json_t *j = s.json ? json_loads(s.json, 0, NULL) : NULL;
    const char *type = json_string_value(json_object_get(j, "type"));
    int kind = -1;
    for (int t = 0; type && t < res->n_kinds && kind < 0; t++)
      if (!strcmp(res->kind[t], type)) kind = t;
    if (type && kind < 0 && res->n_kinds < LOOM_EVAL_MAX_KINDS && strlen(type) < 16) {
      kind = res->n_kinds++;
      snprintf(res->kind[kind], sizeof res->kind[kind], "%s", type);
    }
    if (kind >= 0) map[k++] = (key_kind){loom_strdup(s.key), kind};
    json_decref(j);
    loom_vqa_sample_free(&s);
  }
  loom_vqa_dataset_close(d);
  qsort(map, k, sizeof *map, by_key);
  *out = map;
  *n = k;
  return 0;
}

/* Baselines from DIR/synth_vqa.json, when the data is the synthetic set. */
static void read_baselines(const loom_config *cfg, loom_eval_vqa_result *res) {
  res->baseline = res->prior = -1;
  for (int k = 0; k < LOOM_EVAL_MAX_KINDS; k++) res->kind_baseline[k] = -1;
  if (!loom_is_dir(cfg->data.vqa_path)) return;
  char *path = loom_sprintf("%s/synth_vqa.json", cfg->data.vqa_path);
  json_t *j = json_load_file(path, 0, NULL);
  free(path);
  json_t *bv = json_object_get(j, "baseline_val"), *pv = json_object_get(j, "question_prior_val");
  if (json_is_number(json_object_get(bv, "overall")))
    res->baseline = json_number_value(json_object_get(bv, "overall"));
  if (json_is_number(json_object_get(pv, "overall")))
    res->prior = json_number_value(json_object_get(pv, "overall"));
  for (int k = 0; k < res->n_kinds; k++)
    if (json_is_number(json_object_get(bv, res->kind[k])))
      res->kind_baseline[k] = json_number_value(json_object_get(bv, res->kind[k]));
  json_decref(j);
}

static int kind_of(const key_kind *map, size_t n, const char *key) {
  key_kind probe = {(char *)key, 0};
  const key_kind *hit = n ? bsearch(&probe, map, n, sizeof *map, by_key) : NULL;
  return hit ? hit->kind : -1;
}

int loom_eval_vqa_detail(loom_executor *ex, const loom_config *cfg, const loom_mesh *m,
                         const char *split, long max_batches, loom_eval_vqa_result *res) {
  memset(res, 0, sizeof *res);
  loom_decoder *d = loom_exec_decoder(ex);
  if (m->pp > 1 || m->tp > 1 || m->sp > 1 || m->cp > 1)
    return loom_err("answer accuracy is computed with pp = tp = sp = cp = 1 for now");
  loom_tokenizer *tok;
  if (loom_tokenizer_load(&tok, cfg->data.tokenizer)) return LOOM_ERR;
  loom_vqa_options o = {cfg->data.vqa_path, split, tok, (int)cfg->training.seq_len,
                        (int)cfg->training.micro_batch_size, cfg->data.image_min_pixels,
                        cfg->data.image_max_pixels, m->dp_rank, m->dp, (uint64_t)cfg->run.seed,
                        cfg->data.skip_bad_samples,
                        d->spec.vision.arch == LOOM_VISION_LLAVA ? d->spec.vision.image_size : 0};
  loom_vqa_loader *l;
  key_kind *map = NULL;
  size_t n_map = 0;
  if (loom_vqa_loader_open(&l, &o)) {
    loom_tokenizer_free(tok);
    return LOOM_ERR;
  }
  int rc = read_kinds(cfg, split, res, &map, &n_map);
  long n = (long)loom_vqa_loader_batches_per_epoch(l);
  if (max_batches > 0 && n > max_batches) n = max_batches;
  /* correct, samples, then (correct, samples) per kind */
  double counts[2 + 2 * LOOM_EVAL_MAX_KINDS] = {0};
  int V = d->spec.vocab_size, Vl = d->vloc, T = d->T;
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
      int kind = b.keys ? kind_of(map, n_map, b.keys[r]) : -1;
      counts[1] += 1;
      counts[0] += right == answers;
      if (kind >= 0) {
        counts[2 + 2 * kind + 1] += 1;
        counts[2 + 2 * kind] += right == answers;
      }
    }
  }
  for (size_t i = 0; i < n_map; i++) free(map[i].key);
  free(map);
  loom_vqa_loader_close(l);
  loom_tokenizer_free(tok);
  if (rc) return rc;
  loom_comm_allreduce_f64(&m->dp_comm, counts, 2 + 2 * LOOM_EVAL_MAX_KINDS, LOOM_OP_SUM);
  res->correct = (long)counts[0];
  res->samples = (long)counts[1];
  res->accuracy = counts[1] > 0 ? counts[0] / counts[1] : 0;
  for (int k = 0; k < res->n_kinds; k++) {
    res->kind_correct[k] = (long)counts[2 + 2 * k];
    res->kind_samples[k] = (long)counts[2 + 2 * k + 1];
  }
  read_baselines(cfg, res);
  return 0;
}

void loom_eval_vqa_kinds_line(const loom_eval_vqa_result *res, char *buf, size_t cap) {
  size_t n = 0;
  bool baselines = false, first = true;
  buf[0] = 0;
  for (int k = 0; k < res->n_kinds; k++) baselines |= res->kind_baseline[k] >= 0;
  for (int k = 0; k < res->n_kinds && n < cap; k++) {
    if (!res->kind_samples[k]) continue;
    if (first)
      n += (size_t)snprintf(buf, cap, "answer accuracy by question type%s: ",
                            baselines ? " (majority baseline)" : "");
    if (n >= cap) break;
    n += (size_t)snprintf(buf + n, cap - n, "%s%s %.1f%% of %ld", first ? "" : ", ", res->kind[k],
                          100.0 * (double)res->kind_correct[k] / (double)res->kind_samples[k],
                          res->kind_samples[k]);
    if (n < cap && res->kind_baseline[k] >= 0)
      n += (size_t)snprintf(buf + n, cap - n, " (%.1f%%)", 100.0 * res->kind_baseline[k]);
    first = false;
  }
  if (n && n < cap && res->baseline >= 0)
    snprintf(buf + n, cap - n, "; overall majority baseline %.1f%%, question-only prior %.1f%%",
             100.0 * res->baseline, 100.0 * res->prior);
}
