/* The chat template (Qwen2-VL style) that turns a sample's turns into one token sequence
 * with answer-only targets, and the multimodal rotary position ids of Qwen2-VL's
 * get_rope_index. */
#include <stdlib.h>

#include "loom/core.h"
#include "loom/vqa.h"

int loom_vqa_special_ids(const loom_tokenizer *t, loom_vqa_special *sp) {
  static const char *names[] = LOOM_VQA_SPECIAL_TOKENS;
  int32_t *slots[] = {&sp->pad, &sp->im_start, &sp->im_end, &sp->vision_start, &sp->image_pad,
                      &sp->vision_end};
  for (int i = 0; i < 6; i++) {
    *slots[i] = loom_tokenizer_token_id(t, names[i]);
    if (*slots[i] < 0)
      return loom_err("the tokenizer has no %s token, which the vision-language chat template "
                      "needs: use a Qwen2-VL tokenizer or one written by `loom data synth-vqa` "
                      "(it adds <|im_start|>, <|im_end|>, <|vision_start|>, <|image_pad|>, "
                      "<|vision_end|>)", names[i]);
  }
  return 0;
}

void loom_vqa_seq_free(loom_vqa_seq *s) {
  free(s->ids);
  free(s->is_target);
  free(s->image_start);
  memset(s, 0, sizeof *s);
}

typedef struct {
  loom_vqa_seq *s;
  size_t cap;
} builder;

static void push(builder *b, int32_t id, uint8_t target) {
  loom_vqa_seq *s = b->s;
  if (s->n == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 256;
    s->ids = loom_realloc(s->ids, b->cap, sizeof *s->ids);
    s->is_target = loom_realloc(s->is_target, b->cap, 1);
  }
  s->ids[s->n] = id;
  s->is_target[s->n++] = target;
}

static int push_text(builder *b, loom_tokenizer *t, const char *text, size_t len,
                     uint8_t target) {
  if (len == 0) return 0;
  int32_t *ids;
  size_t n;
  if (loom_tokenizer_encode(t, text, len, &ids, &n)) return -1;
  for (size_t i = 0; i < n; i++) push(b, ids[i], target);
  free(ids);
  return 0;
}

static void push_image(builder *b, const loom_vqa_special *sp, long tokens) {
  loom_vqa_seq *s = b->s;
  push(b, sp->vision_start, 0);
  s->image_start[s->n_images++] = s->n;
  for (long k = 0; k < tokens; k++) push(b, sp->image_pad, 0);
  push(b, sp->vision_end, 0);
  s->prompt_end = s->n;
}

static size_t count_markers(const char *text) {
  size_t n = 0;
  for (const char *p = text; (p = strstr(p, "<image>")); p += 7) n++;
  return n;
}

/* User content: text with each "<image>" replaced by the next image's block; `lead` images
 * without a marker go first. */
static int user_content(builder *b, loom_tokenizer *t, const loom_vqa_special *sp,
                        const char *text, const long *image_tokens, int *next_image, int lead) {
  for (int k = 0; k < lead; k++) push_image(b, sp, image_tokens[(*next_image)++]);
  const char *p = text, *m;
  while ((m = strstr(p, "<image>"))) {
    if (push_text(b, t, p, (size_t)(m - p), 0)) return -1;
    push_image(b, sp, image_tokens[(*next_image)++]);
    p = m + 7;
  }
  return push_text(b, t, p, strlen(p), 0);
}

int loom_vqa_build_seq(loom_tokenizer *t, const loom_vqa_special *sp, const loom_vqa_sample *s,
                       const long *image_tokens, loom_vqa_seq *out) {
  memset(out, 0, sizeof *out);
  builder b = {out, 0};
  size_t markers = 0;
  int first_user = -1, n_answers = 0;
  for (int i = 0; i < s->n_turns; i++) {
    if (s->turns[i].role == LOOM_VQA_USER) {
      markers += count_markers(s->turns[i].text);
      if (first_user < 0) first_user = i;
    } else {
      n_answers++;
    }
  }
  if (markers > (size_t)s->n_images)
    return loom_err("%s: the conversation has %zu <image> markers but %d image%s: fix the "
                    "annotation", s->where, markers, s->n_images, s->n_images == 1 ? "" : "s");
  if (first_user < 0 || n_answers == 0)
    return loom_err("%s: the conversation needs a user turn and an answer (assistant / gpt) "
                    "turn", s->where);
  out->image_start = loom_calloc((size_t)s->n_images + 1, sizeof *out->image_start);
  int next_image = 0;
  for (int i = 0; i < s->n_turns; i++) {
    const loom_vqa_turn *turn = &s->turns[i];
    int user = turn->role == LOOM_VQA_USER;
    if (i > 0 && push_text(&b, t, "\n", 1, 0)) goto fail;
    push(&b, sp->im_start, 0);
    if (push_text(&b, t, user ? "user\n" : "assistant\n", user ? 5 : 10, 0)) goto fail;
    if (user) {
      int lead = i == first_user ? s->n_images - (int)markers : 0;
      if (user_content(&b, t, sp, turn->text, image_tokens, &next_image, lead)) goto fail;
      push(&b, sp->im_end, 0);
    } else {
      if (push_text(&b, t, turn->text, strlen(turn->text), 1)) goto fail;
      push(&b, sp->im_end, 1);
    }
  }
  return 0;
fail:
  loom_err_prefix("%s: ", s->where);
  loom_vqa_seq_free(out);
  return -1;
}

int loom_vqa_mrope(const int32_t *ids, int T, int len, const loom_vqa_special *sp,
                   const int32_t *grids, int n_grids, int32_t *pos, size_t stride,
                   int32_t *delta) {
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < T; i++) pos[k * stride + (size_t)i] = 1; /* padding, as HF */
  int st = 0, img = 0;
  int32_t next = 0; /* max position so far + 1 */
  for (;;) {
    /* next image: a <|vision_start|> followed by <|image_pad|>, from st on */
    int vs = -1;
    for (int i = st; i + 1 < len; i++)
      if (ids[i] == sp->vision_start && ids[i + 1] == sp->image_pad) {
        vs = i;
        break;
      }
    if (vs < 0) break;
    if (img >= n_grids)
      return loom_err("M-RoPE: the sequence holds more images than the %d grids given",
                      n_grids);
    int ed = vs + 1; /* first <|image_pad|> */
    for (int i = st; i < ed; i++)
      for (int k = 0; k < 3; k++) pos[k * stride + (size_t)i] = next + (i - st);
    int32_t base = next + (ed - st);
    int gt = grids[3 * img], gh = grids[3 * img + 1] / 2, gw = grids[3 * img + 2] / 2;
    int32_t mx = base - 1;
    int n = gt * gh * gw;
    if (ed + n > len)
      return loom_err("M-RoPE: image %d needs %d pad tokens from position %d but the row "
                      "holds %d tokens", img, n, ed, len);
    for (int j = 0; j < n; j++) {
      int tt = j / (gh * gw), hh = (j / gw) % gh, ww = j % gw;
      int32_t v[3] = {base + tt, base + hh, base + ww};
      for (int k = 0; k < 3; k++) {
        pos[k * stride + (size_t)(ed + j)] = v[k];
        if (v[k] > mx) mx = v[k];
      }
    }
    next = mx + 1;
    st = ed + n;
    img++;
  }
  for (int i = st; i < len; i++)
    for (int k = 0; k < 3; k++) pos[k * stride + (size_t)i] = next + (i - st);
  int32_t mx = len > st ? next + (len - st) - 1 : next - 1;
  *delta = mx + 1 - len;
  return 0;
}
