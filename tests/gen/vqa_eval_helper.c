/* Test tool (not a test): the answers the training-time evaluation path gives for the first
 * N samples of a VQA split, to compare with `loom generate --image`.
 * usage: gen_vqa_helper CKPT_DIR SPLIT OUT_DIR N [MAX]
 * For sample i (loader order of src/train/eval_vqa.c: micro-batch 1, rank 0 of 1, the run's
 * seed) it writes OUT_DIR/i.jpg (the sample's image) and OUT_DIR/i.txt (its question), and
 * prints one line "i key tf=ID,... greedy=ID,... target=ID,..." where
 *   tf     = the teacher-forced argmax at every answer position, exactly as eval_vqa.c scores
 *            (the training decoder's whole-sequence forward with the vision tokens injected
 *            and the batch's M-RoPE positions);
 *   greedy = greedy decoding through that same forward without a cache: the prompt (up to
 *            "assistant\n"), then the argmax at the last position appended, the whole
 *            sequence recomputed every step, until <|im_end|> (included) or T tokens;
 *            with MAX > 0: exactly MAX tokens (or up to T), not stopping at <|im_end|>;
 *   prompt = the prompt ids (the sequence before the first answer token);
 *   target = the answer tokens and their <|im_end|>. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/checkpoint.h"
#include "loom/hf.h"
#include "loom/vision.h"
#include "loom/vqa.h"

static void print_ids(const char *name, const int32_t *ids, int n) {
  printf(" %s=", name);
  for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
}

static int argmax(const float *l, int V) {
  int best = 0;
  for (int v = 1; v < V; v++)
    if (l[v] > l[best]) best = v;
  return best;
}

/* write the JPEG and question of the sample with this key */
static int write_sample(const loom_config *cfg, const char *split, const char *key,
                        const char *out, int i) {
  loom_vqa_dataset *ds;
  uint64_t bad = 0;
  if (loom_vqa_dataset_open(&ds, cfg->data.vqa_path, split, false, &bad)) return -1;
  int rc = loom_err("sample %s not found", key);
  for (size_t k = 0; k < loom_vqa_dataset_count(ds); k++) {
    loom_vqa_sample s;
    if (loom_vqa_dataset_get(ds, k, &s)) break;
    if (!strcmp(s.key, key)) {
      char *p = loom_sprintf("%s/%d.jpg", out, i), *q = loom_sprintf("%s/%d.txt", out, i);
      rc = loom_write_file_atomic(p, s.images[0], s.image_len[0]) ||
           loom_write_file_atomic(q, s.turns[0].text, strlen(s.turns[0].text));
      free(p), free(q);
      loom_vqa_sample_free(&s);
      break;
    }
    loom_vqa_sample_free(&s);
  }
  loom_vqa_dataset_close(ds);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: %s CKPT_DIR SPLIT OUT_DIR N [MAX]\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1], *split = argv[2], *out = argv[3];
  int N = atoi(argv[4]), MAX = argc == 6 ? atoi(argv[5]) : 0;
  char *cfg_path = loom_sprintf("%s/config.yaml", dir);
  loom_config cfg;
  loom_config_defaults(&cfg);
  loom_model_spec spec;
  if (loom_config_load(&cfg, cfg_path) || loom_model_spec_from_config(&spec, &cfg.model)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 1;
  }
  int T = (int)cfg.training.seq_len, V = spec.vocab_size;
  setenv("LOOM_KEEP_LOGITS", "1", 1);
  loom_decoder *d;
  loom_tokenizer *tok;
  loom_vqa_special sp;
  if (loom_decoder_create(&d, &spec, 1, T, false, false) || loom_ckpt_load_weights(dir, d) ||
      loom_tokenizer_load(&tok, cfg.data.tokenizer) || loom_vqa_special_ids(tok, &sp)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 1;
  }
  bool llava = spec.vision.arch == LOOM_VISION_LLAVA;
  loom_vqa_options o = {cfg.data.vqa_path, split, tok, T, 1, cfg.data.image_min_pixels,
                        cfg.data.image_max_pixels, 0, 1, (uint64_t)cfg.run.seed, false,
                        llava ? spec.vision.image_size : 0};
  loom_vqa_loader *l;
  if (loom_vqa_loader_open(&l, &o)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 1;
  }
  const int *sec = spec.vision.mrope_section;
  bool mrope = sec[0] + sec[1] + sec[2] > 0;
  int32_t *seq = malloc((size_t)T * sizeof *seq), *pos = malloc(3 * (size_t)T * sizeof *pos);
  int *slot = malloc((size_t)T * sizeof *slot);
  int32_t tf[64], greedy[64], target[64];
  for (int i = 0; i < N; i++) {
    loom_vqa_batch b;
    if (loom_vqa_loader_next(l, &b) || write_sample(&cfg, split, b.keys[0], out, i)) {
      fprintf(stderr, "%s\n", loom_errmsg());
      return 1;
    }
    loom_vision *v;
    float *feats = malloc((size_t)b.image_tokens[0] * spec.hidden * sizeof(float));
    loom_vision_input in = {1, (const int(*)[3])b.grid_thw, b.pixel_values, (int)b.total_patches};
    if (loom_vision_create(&v, d, (int)b.total_patches) || loom_vision_forward(v, &in, feats)) {
      fprintf(stderr, "%s\n", loom_errmsg());
      return 1;
    }
    for (int t = 0; t < T; t++) slot[t] = -1;
    for (int k = 0; k < b.image_tokens[0]; k++) slot[b.image_token_offset[0] + k] = k;
    loom_acts *a = loom_decoder_slot_get(d, 0, 0);
    a->inject_slot = slot;
    a->inject_feats = feats;
    /* teacher forcing, as eval_vqa.c */
    a->mrope_pos = mrope ? b.position_ids : NULL;
    loom_decoder_forward_chunk(d, a, b.input_ids, NULL, NULL, NULL);
    int n_tf = 0, first = -1;
    for (int t = 0; t < T; t++)
      if (b.targets[t] != LOOM_VQA_IGNORE) {
        if (first < 0) first = t;
        target[n_tf] = b.targets[t];
        tf[n_tf++] = argmax(d->logits + (size_t)t * d->vloc, V);
      }
    /* greedy through the same forward, recomputing the whole sequence every step */
    int len = first + 1, n_g = 0;
    memcpy(seq, b.input_ids, (size_t)len * sizeof *seq);
    while (len < T && n_g < (MAX > 0 ? MAX : 64)) {
      for (int t = len; t < T; t++) seq[t] = sp.pad;
      int32_t delta;
      if (mrope) loom_vqa_mrope(seq, T, len, &sp, b.grid_thw, 1, pos, (size_t)T, &delta);
      a->mrope_pos = mrope ? pos : NULL;
      loom_decoder_forward_chunk(d, a, seq, NULL, NULL, NULL);
      int next = argmax(d->logits + (size_t)(len - 1) * d->vloc, V);
      greedy[n_g++] = next;
      seq[len++] = next;
      if (next == sp.im_end && MAX <= 0) break;
    }
    loom_decoder_slot_release(d, a);
    printf("%d %s", i, b.keys[0]);
    print_ids("prompt", b.input_ids, first + 1);
    print_ids("tf", tf, n_tf);
    print_ids("greedy", greedy, n_g);
    print_ids("target", target, n_tf);
    printf("\n");
    loom_vision_free(v);
    free(feats);
  }
  loom_vqa_loader_close(l);
  loom_tokenizer_free(tok);
  loom_decoder_free(d);
  free(seq), free(pos), free(slot), free(cfg_path);
  return 0;
}
