/* The vision-language loader on a synth-vqa set: chat template and answer-only targets,
 * batch fields (pixels, grids, image offsets), M-RoPE ids, determinism, rank sharding over an
 * epoch, state save/restore (also across an epoch boundary), truncation, and the errors for
 * a seq_len too small for the image and for too few samples. */
#include <stdlib.h>

#include "data_test_util.h"
#include "loom/vqa.h"

#define DIR_ "data-vqa-loader.tmp"
#define SET DIR_ "/set"

static loom_tokenizer *tok;

static loom_vqa_options opts(int T, int B, int rank, int world, uint64_t seed) {
  loom_vqa_options o = {SET, "train", tok, T, B, 0, 0, rank, world, seed, false, 0};
  return o;
}

static char *decode(const int32_t *ids, size_t n) {
  char *text;
  size_t len;
  if (loom_tokenizer_decode(tok, ids, n, &text, &len)) return loom_strdup("?");
  return text;
}

/* key -> "question\nanswer" of every train sample, from the dataset itself. */
static char *qa_of(const char *key) {
  loom_vqa_dataset *d;
  uint64_t bad;
  char *out = NULL;
  if (loom_vqa_dataset_open(&d, SET, "train", false, &bad)) return NULL;
  for (size_t i = 0; i < loom_vqa_dataset_count(d) && !out; i++) {
    loom_vqa_sample s;
    if (loom_vqa_dataset_get(d, i, &s)) continue;
    if (!strcmp(s.key, key)) out = loom_sprintf("%s\n%s", s.turns[0].text, s.turns[1].text);
    loom_vqa_sample_free(&s);
  }
  loom_vqa_dataset_close(d);
  return out;
}

static void template_and_fields(void) {
  loom_vqa_loader *l;
  loom_vqa_options o = opts(64, 4, 0, 1, 7);
  CHECK(loom_vqa_loader_open(&l, &o) == 0, "open: %s", loom_errmsg());
  CHECK(loom_vqa_loader_num_samples(l) == 56 && loom_vqa_loader_batches_per_epoch(l) == 14,
        "56 train samples, 14 calls per epoch");
  loom_vqa_batch b;
  CHECK(loom_vqa_loader_next(l, &b) == 0, "next: %s", loom_errmsg());
  loom_vqa_special sp;
  loom_vqa_special_ids(tok, &sp);
  CHECK(b.n_images == 4 && b.total_patches == 256, "4 images of 64 patches");
  for (int r = 0; r < 4; r++) {
    const int32_t *in = b.input_ids + r * 64, *tg = b.targets + r * 64;
    int len = b.lengths[r], mask = 0;
    for (int t = 0; t < 64; t++) mask += b.attention_mask[r * 64 + t];
    CHECK(mask == len && len > 20 && len < 64, "row %d: length %d = mask sum %d", r, len, mask);
    CHECK(b.grid_thw[3 * r] == 1 && b.grid_thw[3 * r + 1] == 8 && b.grid_thw[3 * r + 2] == 8 &&
              b.image_tokens[r] == 16 && b.image_row[r] == r && b.images_per_sample[r] == 1 &&
              b.image_patch_offset[r] == 64 * r, "row %d image fields", r);
    char *qa = qa_of(b.keys[r]);
    CHECK(qa != NULL, "key %s found", b.keys[r]);
    if (!qa) continue;
    char *nl = strchr(qa, '\n');
    *nl = 0;
    char pads[16 * 13 + 1] = "";
    for (int k = 0; k < 16; k++) strcat(pads, "<|image_pad|>");
    char *want = loom_sprintf("<|im_start|>user\n<|vision_start|>%s<|vision_end|>%s<|im_end|>\n"
                              "<|im_start|>assistant\n%s<|im_end|>", pads, qa, nl + 1);
    char *got = decode(in, (size_t)len);
    CHECK(!strcmp(got, want), "row %d template:\n got  %s\n want %s", r, got, want);
    CHECK(in[b.image_token_offset[r]] == sp.image_pad &&
              in[b.image_token_offset[r] - 1] == sp.vision_start &&
              in[b.image_token_offset[r] + 16] == sp.vision_end, "image offset points at pads");
    /* targets: exactly the answer and its <|im_end|>, at t = position - 1 */
    int32_t tgt[64];
    size_t nt = 0;
    int shifted = 1;
    for (int t = 0; t < 64; t++)
      if (tg[t] != LOOM_VQA_IGNORE) {
        tgt[nt++] = tg[t];
        shifted &= t + 1 < len && tg[t] == in[t + 1];
      }
    char *ans = decode(tgt, nt), *want_ans = loom_sprintf("%s<|im_end|>", nl + 1);
    CHECK(!strcmp(ans, want_ans), "row %d targets decode to '%s' (want '%s')", r, ans, want_ans);
    CHECK(shifted, "targets are inputs shifted by one");
    for (int t = len; t < 64; t++) CHECK(in[t] == sp.pad && tg[t] == LOOM_VQA_IGNORE, "padding");
    /* M-RoPE: text counts up, the image is (t0, t0+row, t0+col) on the 4x4 merged grid */
    const int32_t *p0 = b.position_ids + r * 64, *p1 = p0 + 4 * 64, *p2 = p1 + 4 * 64;
    int st = b.image_token_offset[r], ok = 1;
    for (int t = 0; t < st; t++) ok &= p0[t] == t && p1[t] == t && p2[t] == t;
    for (int j = 0; j < 16; j++)
      ok &= p0[st + j] == st && p1[st + j] == st + j / 4 && p2[st + j] == st + j % 4;
    for (int t = st + 16; t < len; t++) ok &= p0[t] == st + 4 + (t - st - 16) && p1[t] == p0[t];
    for (int t = len; t < 64; t++) ok &= p0[t] == 1;
    CHECK(ok, "row %d M-RoPE ids", r);
    CHECK(b.rope_deltas[r] == -12, "rope delta %d (4 positions for 16 tokens)", b.rope_deltas[r]);
    free(ans);
    free(want_ans);
    free(got);
    free(want);
    free(qa);
  }
  loom_vqa_loader_close(l);
}

/* A digest of everything a batch holds. */
static uint64_t digest(const loom_vqa_batch *b) {
  size_t BT = (size_t)b->B * b->T;
  uint64_t h = loom_hash64(b->input_ids, BT * 4, 1);
  h = loom_hash64(b->targets, BT * 4, h);
  h = loom_hash64(b->position_ids, 3 * BT * 4, h);
  h = loom_hash64(b->pixel_values, (size_t)b->total_patches * LOOM_IMG_PATCH_DIM * 4, h);
  return loom_hash64(b->grid_thw, (size_t)b->n_images * 12, h);
}

static void determinism_and_state(void) {
  loom_vqa_loader *a, *c;
  loom_vqa_options o = opts(64, 4, 0, 1, 11);
  loom_vqa_loader_open(&a, &o);
  loom_vqa_loader_open(&c, &o);
  loom_vqa_batch b;
  uint64_t da[5], dc[5];
  for (int i = 0; i < 5; i++) {
    loom_vqa_loader_next(a, &b);
    da[i] = digest(&b);
    loom_vqa_loader_next(c, &b);
    dc[i] = digest(&b);
  }
  CHECK(!memcmp(da, dc, sizeof da), "same seed, same batches");
  loom_vqa_loader_close(c);
  o.seed = 12;
  loom_vqa_loader_open(&c, &o);
  loom_vqa_loader_next(c, &b);
  CHECK(digest(&b) != da[0], "another seed, another order");
  loom_vqa_loader_close(c);
  /* save after 5 calls, continue 2; a new loader restored to the state gives the same 2 */
  loom_vqa_state s;
  loom_vqa_loader_get_state(a, &s);
  CHECK(s.epoch == 0 && s.index == 5, "state (0, 5)");
  uint64_t next[2], again[2];
  for (int i = 0; i < 2; i++) loom_vqa_loader_next(a, &b), next[i] = digest(&b);
  o.seed = 11;
  loom_vqa_loader_open(&c, &o);
  CHECK(loom_vqa_loader_set_state(c, &s) == 0, "set state");
  for (int i = 0; i < 2; i++) loom_vqa_loader_next(c, &b), again[i] = digest(&b);
  CHECK(!memcmp(next, again, sizeof next), "restored state continues identically");
  /* across the epoch boundary */
  loom_vqa_state last = {0, 13, 0}, after;
  loom_vqa_loader_set_state(c, &last);
  loom_vqa_loader_next(c, &b);
  loom_vqa_loader_get_state(c, &after);
  CHECK(after.epoch == 1 && after.index == 0, "epoch wraps after 14 calls");
  uint64_t e1 = 0;
  loom_vqa_loader_next(c, &b), e1 = digest(&b);
  loom_vqa_loader_set_state(a, &after);
  loom_vqa_loader_next(a, &b);
  CHECK(digest(&b) == e1, "epoch 1 restored identically");
  loom_vqa_state badst = {0, 14, 0};
  CHECK(loom_vqa_loader_set_state(a, &badst) != 0 && contains(loom_errmsg(), "14"),
        "index past the epoch refused: %s", loom_errmsg());
  loom_vqa_loader_close(a);
  loom_vqa_loader_close(c);
}

static int cmp_str(const void *x, const void *y) {
  return strcmp(*(char *const *)x, *(char *const *)y);
}

static void rank_sharding(void) {
  loom_vqa_loader *l[2];
  char *keys[56];
  int n = 0;
  for (int r = 0; r < 2; r++) {
    loom_vqa_options o = opts(64, 2, r, 2, 3);
    CHECK(loom_vqa_loader_open(&l[r], &o) == 0, "rank %d: %s", r, loom_errmsg());
  }
  CHECK(loom_vqa_loader_batches_per_epoch(l[0]) == 14, "56 / (2*2) = 14 calls");
  for (int call = 0; call < 14; call++)
    for (int r = 0; r < 2; r++) {
      loom_vqa_batch b;
      loom_vqa_loader_next(l[r], &b);
      for (int i = 0; i < 2 && n < 56; i++) keys[n++] = loom_strdup(b.keys[i]);
    }
  qsort(keys, (size_t)n, sizeof *keys, cmp_str);
  int distinct = n > 0;
  for (int i = 1; i < n; i++) distinct &= strcmp(keys[i - 1], keys[i]) != 0;
  CHECK(n == 56 && distinct, "one epoch over 2 ranks visits each of the 56 samples once");
  for (int i = 0; i < n; i++) free(keys[i]);
  loom_vqa_loader_close(l[0]);
  loom_vqa_loader_close(l[1]);
}

static void truncation_and_limits(void) {
  loom_vqa_loader *l;
  loom_vqa_options o = opts(64, 1, 0, 1, 21);
  loom_vqa_loader_open(&l, &o);
  loom_vqa_batch b;
  loom_vqa_loader_next(l, &b);
  int len = b.lengths[0];
  loom_vqa_loader_close(l);
  o.seq_len = len - 2; /* same order (it does not depend on T): cut the answer's end */
  loom_vqa_loader_open(&l, &o);
  CHECK(loom_vqa_loader_next(l, &b) == 0, "%s", loom_errmsg());
  CHECK(b.truncated == 1 && b.lengths[0] == len - 2, "answer cut: truncated %d", b.truncated);
  loom_vqa_loader_close(l);
  o.seq_len = 16; /* 16 vision tokens + template cannot fit */
  loom_vqa_loader_open(&l, &o);
  CHECK(loom_vqa_loader_next(l, &b) != 0, "image longer than seq_len fails");
  const char *m = loom_errmsg();
  CHECK(contains(m, "16 vision tokens") && contains(m, "seq_len 16") && contains(m, "sample"),
        "message with numbers: %s", m);
  loom_vqa_loader_close(l);
  o = opts(64, 20, 0, 3, 1);
  CHECK(loom_vqa_loader_open(&l, &o) != 0 && contains(loom_errmsg(), "56 samples") &&
            contains(loom_errmsg(), "60"), "too few samples: %s", loom_errmsg());
  o = opts(64, 4, 0, 1, 1);
  o.split = "test";
  CHECK(loom_vqa_loader_open(&l, &o) != 0 && contains(loom_errmsg(), "no samples"),
        "empty split: %s", loom_errmsg());
  o.split = "val";
  CHECK(loom_vqa_loader_open(&l, &o) == 0 && loom_vqa_loader_num_samples(l) == 8, "val split");
  loom_vqa_loader_close(l);
}

int main(void) {
  loom_rm_rf(DIR_);
  run_result r = run_loom(DIR_, "data synth-vqa --out " SET " --samples 64 --shard-size 8 --seed 5 "
                              "--image-size 112");
  CHECK(r.status == 0, "synth-vqa: %s", r.err);
  run_done(&r);
  if (loom_tokenizer_load(&tok, SET "/tokenizer.json")) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 1;
  }
  template_and_fields();
  determinism_and_state();
  rank_sharding();
  truncation_and_limits();
  loom_tokenizer_free(tok);
  loom_rm_rf(DIR_);
  return harness_finish("test_vqa_loader");
}
