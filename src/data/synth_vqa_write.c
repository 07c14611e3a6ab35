/* `loom data synth-vqa`: write the synthetic shapes VQA set as tar shards (N.jpg, N.json
 * {"question", "type", "answer", "id"}, N.txt answer), prepare it (.nv-meta), train its
 * tokenizer (byte-level BPE + the chat/vision special tokens) and compute the
 * majority-answer baselines per question type (DIR/synth_vqa.json). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/tar.h"
#include "loom/vqa.h"

#define MAX_ANSWERS 8
#define MAX_QUESTIONS 64 /* distinct question texts (34 with the built-in wordings) */

/* Answer counts of one question text. */
typedef struct {
  char text[96];
  int type;
  char answer[MAX_ANSWERS][16];
  long count[MAX_ANSWERS];
} question_tally;

/* Answer counts per type and per question text within one shard. */
typedef struct {
  char answer[LOOM_SYNTH_VQA_TYPES][MAX_ANSWERS][16];
  long count[LOOM_SYNTH_VQA_TYPES][MAX_ANSWERS];
  question_tally q[MAX_QUESTIONS];
  int n_q;
} tally;

static void answer_add(char (*answers)[16], long *count, const char *answer, long n) {
  for (int k = 0; k < MAX_ANSWERS; k++) {
    if (!answers[k][0]) snprintf(answers[k], 16, "%s", answer);
    if (!strcmp(answers[k], answer)) {
      count[k] += n;
      return;
    }
  }
}

static question_tally *question_find(tally *t, const char *text) {
  for (int i = 0; i < t->n_q; i++)
    if (!strcmp(t->q[i].text, text)) return &t->q[i];
  return NULL;
}

static void question_add(tally *t, int type, const char *question, const char *answer, long n) {
  question_tally *q = question_find(t, question);
  if (!q && t->n_q < MAX_QUESTIONS) {
    q = &t->q[t->n_q++];
    snprintf(q->text, sizeof q->text, "%s", question);
    q->type = type;
  }
  if (q) answer_add(q->answer, q->count, answer, n);
}

static void tally_add(tally *t, int type, const char *question, const char *answer) {
  answer_add(t->answer[type], t->count[type], answer, 1);
  question_add(t, type, question, answer, 1);
}

static void tally_merge(tally *into, const tally *t) {
  for (int ty = 0; ty < LOOM_SYNTH_VQA_TYPES; ty++)
    for (int k = 0; k < MAX_ANSWERS && t->answer[ty][k][0]; k++)
      answer_add(into->answer[ty], into->count[ty], t->answer[ty][k], t->count[ty][k]);
  for (int i = 0; i < t->n_q; i++)
    for (int k = 0; k < MAX_ANSWERS && t->q[i].answer[k][0]; k++)
      question_add(into, t->q[i].type, t->q[i].text, t->q[i].answer[k], t->q[i].count[k]);
}

typedef struct {
  char *buf;
  size_t n, cap;
} text;

static void text_add(text *t, const char *s) {
  size_t k = strlen(s);
  if (t->n + k + 1 > t->cap) {
    t->cap = 2 * (t->n + k + 1);
    t->buf = loom_realloc(t->buf, t->cap, 1);
  }
  memcpy(t->buf + t->n, s, k + 1);
  t->n += k;
}

static int write_shard(const loom_synth_vqa_options *o, long first, long count, const char *path,
                       tally *t, text *corpus) {
  loom_tar_writer *w;
  if (loom_tar_writer_open(&w, path)) return -1;
  for (long i = first; i < first + count; i++) {
    loom_synth_scene s;
    loom_synth_vqa_scene(o, (uint64_t)i, &s);
    uint8_t *jpg;
    size_t jlen;
    int rc = loom_jpeg_encode(&s.image, 90, &jpg, &jlen);
    loom_image_free(&s.image);
    if (rc) {
      loom_tar_writer_abort(w);
      return -1;
    }
    json_t *j = json_pack("{s:s, s:s, s:s, s:I}", "question", s.question, "type",
                          loom_synth_vqa_type_name(s.type), "answer", s.answer, "id",
                          (json_int_t)i);
    char *js = json_dumps(j, JSON_PRESERVE_ORDER);
    json_decref(j);
    char name[64];
    snprintf(name, sizeof name, "%08ld.jpg", i);
    rc = loom_tar_writer_add(w, name, jpg, jlen);
    snprintf(name, sizeof name, "%08ld.json", i);
    if (rc == 0) rc = loom_tar_writer_add(w, name, js, strlen(js));
    snprintf(name, sizeof name, "%08ld.txt", i);
    if (rc == 0) rc = loom_tar_writer_add(w, name, s.answer, strlen(s.answer));
    free(js);
    free(jpg);
    if (rc) {
      loom_tar_writer_abort(w);
      return -1;
    }
    tally_add(t, s.type, s.question, s.answer);
    text_add(corpus, "user\n");
    text_add(corpus, s.question);
    text_add(corpus, "\nassistant\n");
    text_add(corpus, s.answer);
    text_add(corpus, "<|endoftext|>");
  }
  return loom_tar_writer_close(w);
}

/* Append the chat and vision special tokens to a trained tokenizer.json. */
static int add_special_tokens(const char *path, int *vocab_size) {
  static const char *extra[] = {"<|im_start|>", "<|im_end|>", "<|vision_start|>",
                                "<|image_pad|>", "<|vision_end|>"};
  json_error_t je;
  json_t *root = json_load_file(path, JSON_PRESERVE_ORDER, &je);
  if (!root) return loom_err("%s: cannot re-read the trained tokenizer: %s", path, je.text);
  json_t *added = json_object_get(root, "added_tokens");
  json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
  json_int_t next = 0;
  const char *k;
  json_t *v;
  json_object_foreach(vocab, k, v) if (json_integer_value(v) >= next) next = json_integer_value(v) + 1;
  for (size_t i = 0; i < sizeof extra / sizeof *extra; i++, next++) {
    json_array_append_new(added, json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id", next,
                                           "content", extra[i], "single_word", 0, "lstrip", 0,
                                           "rstrip", 0, "normalized", 0, "special", 1));
    json_object_set_new(vocab, extra[i], json_integer(next));
  }
  *vocab_size = (int)next;
  char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  size_t n = strlen(s);
  s[n] = '\n';
  int rc = loom_write_file_atomic(path, s, n + 1);
  free(s);
  return rc;
}

/* Split of each shard, read back from the split.yaml prepare wrote. */
static int shard_splits(const char *dir, long n_shards, int *split_of) {
  char *path = loom_sprintf("%s/.nv-meta/split.yaml", dir);
  struct json_t *root = loom_energon_yaml_load(path);
  free(path);
  if (!root) return -1;
  static const char *names[3] = {"train", "val", "test"};
  for (long i = 0; i < n_shards; i++) split_of[i] = -1;
  for (int s = 0; s < 3; s++) {
    json_t *list = json_object_get(json_object_get(root, "split_parts"), names[s]);
    for (size_t k = 0; k < json_array_size(list); k++) {
      long idx = strtol(json_string_value(json_array_get(list, k)), NULL, 10);
      if (idx >= 0 && idx < n_shards) split_of[idx] = s;
    }
  }
  json_decref(root);
  return 0;
}

/* Index of the most frequent answer (the first seen on ties). */
static int most_frequent(const long *count) {
  int best = 0;
  for (int k = 1; k < MAX_ANSWERS; k++)
    if (count[k] > count[best]) best = k;
  return best;
}

/* Val hits of answering with `answer`. */
static long hits_of(const char (*answers)[16], const long *count, const char *answer) {
  for (int k = 0; k < MAX_ANSWERS && answers[k][0]; k++)
    if (!strcmp(answers[k], answer)) return count[k];
  return 0;
}

/* Baselines: answer each type with train's most frequent answer of the type (majority), and
 * each question text with train's most frequent answer of that text (question prior: the
 * best a model can do from the question alone, as estimated on train). */
static void baselines(tally *train, const tally *val, loom_synth_vqa_report *r) {
  long hit_tr = 0, hit_va = 0, n_tr = 0, n_va = 0, prior_va[LOOM_SYNTH_VQA_TYPES + 1] = {0};
  for (int ty = 0; ty < LOOM_SYNTH_VQA_TYPES; ty++) {
    int best = most_frequent(train->count[ty]);
    long tot_tr = 0, tot_va = 0;
    for (int k = 0; k < MAX_ANSWERS; k++) {
      tot_tr += train->count[ty][k];
      tot_va += val->count[ty][k];
    }
    snprintf(r->majority[ty], sizeof r->majority[ty], "%s", train->answer[ty][best]);
    long va_hits = hits_of(val->answer[ty], val->count[ty], r->majority[ty]);
    r->count_train[ty] = tot_tr;
    r->count_val[ty] = tot_va;
    r->baseline_train[ty] = tot_tr ? (double)train->count[ty][best] / (double)tot_tr : 0;
    r->baseline_val[ty] = tot_va ? (double)va_hits / (double)tot_va : 0;
    hit_tr += train->count[ty][best];
    hit_va += va_hits;
    n_tr += tot_tr;
    n_va += tot_va;
  }
  for (int i = 0; i < val->n_q; i++) {
    const question_tally *vq = &val->q[i];
    const question_tally *tq = question_find(train, vq->text);
    const char *guess = tq ? tq->answer[most_frequent(tq->count)] : r->majority[vq->type];
    long h = hits_of(vq->answer, vq->count, guess);
    prior_va[vq->type] += h;
    prior_va[LOOM_SYNTH_VQA_TYPES] += h;
  }
  r->count_train[LOOM_SYNTH_VQA_TYPES] = n_tr;
  r->count_val[LOOM_SYNTH_VQA_TYPES] = n_va;
  r->baseline_train[LOOM_SYNTH_VQA_TYPES] = n_tr ? (double)hit_tr / (double)n_tr : 0;
  r->baseline_val[LOOM_SYNTH_VQA_TYPES] = n_va ? (double)hit_va / (double)n_va : 0;
  for (int ty = 0; ty <= LOOM_SYNTH_VQA_TYPES; ty++)
    r->prior_val[ty] = r->count_val[ty] ? (double)prior_va[ty] / (double)r->count_val[ty] : 0;
}

static int write_summary(const loom_synth_vqa_options *o, const loom_synth_vqa_report *r) {
  json_t *bt = json_object(), *bv = json_object(), *pv = json_object(), *maj = json_object();
  json_t *types = json_array();
  for (int ty = 0; ty <= LOOM_SYNTH_VQA_TYPES; ty++) {
    if (ty < LOOM_SYNTH_VQA_TYPES && !(o->types & (1u << ty))) continue;
    const char *name = ty < LOOM_SYNTH_VQA_TYPES ? r->type_names[ty] : "overall";
    json_object_set_new(bt, name, json_real(r->baseline_train[ty]));
    json_object_set_new(bv, name, json_real(r->baseline_val[ty]));
    json_object_set_new(pv, name, json_real(r->prior_val[ty]));
    if (ty < LOOM_SYNTH_VQA_TYPES) {
      json_object_set_new(maj, name, json_string(r->majority[ty]));
      json_array_append_new(types, json_string(name));
    }
  }
  json_t *root = json_pack("{s:s, s:I, s:I, s:I, s:i, s:i, s:i, s:b, s:o, s:o, s:o, s:o, s:s, "
                           "s:o, s:s}",
                           "format", "loom-synth-vqa", "samples", (json_int_t)o->samples,
                           "shard_size", (json_int_t)o->shard_size, "seed", (json_int_t)o->seed,
                           "image_size", o->image_size, "distractors", o->distractors,
                           "vocab_size", r->vocab_size, "blank_images", o->blank_images,
                           "question_types", types,
                           "majority_answer", maj, "baseline_train", bt, "baseline_val", bv,
                           "baseline_meaning",
                           "accuracy of answering every question of a type with the most "
                           "frequent train answer of that type",
                           "question_prior_val", pv, "question_prior_meaning",
                           "accuracy on val of answering each question text with the most "
                           "frequent train answer of that exact text: the best a model can do "
                           "without looking at the image, as estimated from train");
  char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  char *path = loom_sprintf("%s/synth_vqa.json", o->out);
  size_t n = strlen(s);
  s[n] = '\n';
  int rc = loom_write_file_atomic(path, s, n + 1);
  free(path);
  free(s);
  return rc;
}

int loom_synth_vqa(const loom_synth_vqa_options *o, loom_synth_vqa_report *r) {
  memset(r, 0, sizeof *r);
  for (int ty = 0; ty < LOOM_SYNTH_VQA_TYPES; ty++) r->type_names[ty] = loom_synth_vqa_type_name(ty);
  if (o->samples < 1 || o->shard_size < 1 || o->image_size < LOOM_IMG_MIN_SIDE ||
      o->image_size > 4096)
    return loom_err("synth-vqa: need --samples >= 1, --shard-size >= 1 and --image-size in "
                    "[28, 4096] (got %ld, %ld, %d)", o->samples, o->shard_size, o->image_size);
  if (o->distractors < 0 || o->distractors > LOOM_SYNTH_VQA_MAX_OBJECTS - 1)
    return loom_err("synth-vqa: --distractors must be 0..%d (got %d)",
                    LOOM_SYNTH_VQA_MAX_OBJECTS - 1, o->distractors);
  if (!(o->types & ((1u << LOOM_SYNTH_VQA_TYPES) - 1)))
    return loom_err("synth-vqa: no question type asked (--types)");
  if (loom_mkdir_p(o->out)) return -1;
  long n_shards = (o->samples + o->shard_size - 1) / o->shard_size;
  tally *tallies = loom_calloc((size_t)n_shards, sizeof *tallies);
  int *split_of = loom_calloc((size_t)n_shards, sizeof *split_of);
  text corpus = {0};
  int rc = 0;
  for (long s = 0; rc == 0 && s < n_shards; s++) {
    char *path = loom_sprintf("%s/%06ld.tar", o->out, s);
    long first = s * o->shard_size;
    long count = first + o->shard_size > o->samples ? o->samples - first : o->shard_size;
    rc = write_shard(o, first, count, path, &tallies[s], &corpus);
    free(path);
  }
  loom_prepare_options po = {false, true};
  if (rc == 0) rc = loom_energon_prepare(o->out, o->split, &po, &r->prepare);
  if (rc == 0) rc = shard_splits(o->out, n_shards, split_of);
  char *tok = loom_sprintf("%s/tokenizer.json", o->out);
  if (rc == 0) rc = loom_tokenizer_train(corpus.buf, corpus.n, o->vocab_size, tok);
  if (rc == 0) rc = add_special_tokens(tok, &r->vocab_size);
  free(tok);
  if (rc == 0) {
    tally train, val;
    memset(&train, 0, sizeof train);
    memset(&val, 0, sizeof val);
    for (long s = 0; s < n_shards; s++)
      if (split_of[s] == 0) tally_merge(&train, &tallies[s]);
      else if (split_of[s] == 1) tally_merge(&val, &tallies[s]);
    baselines(&train, &val, r);
    rc = write_summary(o, r);
  }
  free(corpus.buf);
  free(tallies);
  free(split_of);
  return rc;
}
