/* The prompt of a question about an image for a vision-language model, built exactly as the
 * training data path builds a VQA sample (one image leading the user turn, the question, the
 * Qwen2-VL chat template of src/data/vqa_template.c, the image preprocessing of the VQA
 * loader: smart_resize + patchify, or the fixed-size LLaVA pipeline), cut after
 * "<|im_start|>assistant\n" where the answer begins; the vision encoder runs once and its
 * tokens replace the <|image_pad|> embeddings. */
#include <stdlib.h>

#include "loom/generate.h"
#include "loom/image.h"
#include "loom/vqa.h"

void loom_vlm_prompt_free(loom_vlm_prompt *p) {
  free(p->ids);
  free(p->mrope);
  free(p->inject);
  free(p->embeds);
  memset(p, 0, sizeof *p);
}

int loom_vlm_prompt_build(const loom_gen_model *m, loom_tokenizer *tok, const char *image_path,
                          const char *question, loom_vlm_prompt *p) {
  memset(p, 0, sizeof *p);
  const loom_vision_spec *vs = &m->spec.vision;
  if (vs->arch == LOOM_VISION_NONE)
    return loom_err("--image given but the checkpoint %s is a text-only model (model.preset "
                    "'%s' has no vision encoder): drop --image or use a vision-language "
                    "checkpoint", m->dir, m->cfg.model.preset);
  loom_vqa_special sp;
  if (loom_vqa_special_ids(tok, &sp)) return LOOM_ERR;
  char *jpeg;
  size_t len;
  if (loom_read_file(image_path, &jpeg, &len))
    return loom_err_prefix("--image %s: ", image_path);
  float *patches = NULL;
  loom_vision_grid g;
  int rc = vs->arch == LOOM_VISION_LLAVA
               ? loom_image_prepare_fixed((const uint8_t *)jpeg, len, vs->image_size, image_path,
                                          &patches, &g, NULL, NULL)
               : loom_image_prepare((const uint8_t *)jpeg, len, m->cfg.data.image_min_pixels,
                                    m->cfg.data.image_max_pixels, image_path, &patches, &g, NULL,
                                    NULL);
  if (rc) {
    free(jpeg);
    return LOOM_ERR;
  }
  /* the sample as the Energon reader makes it: one image, the question, an (empty) answer */
  uint8_t *images[1] = {(uint8_t *)jpeg};
  size_t image_len[1] = {len};
  loom_vqa_turn turns[2] = {{LOOM_VQA_USER, (char *)question}, {LOOM_VQA_ASSISTANT, ""}};
  loom_vqa_sample s = {0};
  s.key = s.where = (char *)image_path;
  s.n_images = 1;
  s.images = images;
  s.image_len = image_len;
  s.n_turns = 2;
  s.turns = turns;
  long tokens = g.tokens;
  int grid[3] = {g.grid_t, g.grid_h, g.grid_w};
  int want = loom_vision_tokens(vs, g.grid_t, g.grid_h, g.grid_w);
  if (want != tokens)
    rc = loom_err("%s: the image becomes %ld tokens but the vision encoder makes %d from its "
                  "grid %dx%dx%d", image_path, tokens, want, grid[0], grid[1], grid[2]);
  loom_vqa_seq q = {0};
  if (!rc) rc = loom_vqa_build_seq(tok, &sp, &s, &tokens, &q);
  free(jpeg);
  if (rc) {
    free(patches);
    return LOOM_ERR;
  }
  /* the answer's closing <|im_end|> is the last token: the prompt is everything before it */
  LOOM_ASSERT(q.n >= 2 && q.ids[q.n - 1] == sp.im_end);
  p->n = (int)q.n - 1;
  p->ids = loom_malloc((size_t)p->n * sizeof *p->ids);
  p->inject = loom_malloc((size_t)p->n * sizeof *p->inject);
  memcpy(p->ids, q.ids, (size_t)p->n * sizeof *p->ids);
  for (int i = 0; i < p->n; i++) p->inject[i] = -1;
  for (long k = 0; k < tokens; k++) p->inject[q.image_start[0] + (size_t)k] = (int)k;
  loom_vqa_seq_free(&q);
  const int *sec = vs->mrope_section;
  if (sec[0] + sec[1] + sec[2] > 0) { /* Qwen2-VL M-RoPE ids of the prompt */
    int32_t grids[3] = {grid[0], grid[1], grid[2]};
    p->mrope = loom_malloc(3 * (size_t)p->n * sizeof *p->mrope);
    if (loom_vqa_mrope(p->ids, p->n, p->n, &sp, grids, 1, p->mrope, (size_t)p->n,
                       &p->rope_delta)) {
      free(patches);
      loom_vlm_prompt_free(p);
      return LOOM_ERR;
    }
  }
  /* the vision encoder, once */
  loom_vision *v;
  p->tokens = (int)tokens;
  p->embeds = loom_malloc((size_t)tokens * m->spec.hidden * sizeof(float));
  rc = loom_vision_create(&v, m->d, (int)g.patches);
  if (!rc) {
    loom_vision_input in = {1, (const int(*)[3])grid, patches, (int)g.patches};
    rc = loom_vision_forward(v, &in, p->embeds);
    loom_vision_free(v);
  }
  free(patches);
  if (rc) loom_vlm_prompt_free(p);
  return rc;
}
