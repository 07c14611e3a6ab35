/* loom_vlm_dump: a whole vision-language forward/backward of loom (vision encoder, its tokens
 * in place of the image pads, multimodal rotary positions, loss on the chosen targets) on
 * random weights and data, written to one safetensors file for check_vlm.py.
 *
 * usage: loom_vlm_dump OUT.safetensors PRESET */
#include <stdio.h>
#include <stdlib.h>

#include "loom/decoder.h"
#include "loom/kernels.h"
#include "loom/safetensors.h"
#include "loom/vision.h"

enum { B = 2, T = 80 };

int main(int argc, char **argv) {
  if (argc < 3) return fprintf(stderr, "usage: loom_vlm_dump OUT PRESET\n"), 2;
  loom_model_spec spec;
  if (loom_model_preset(&spec, argv[2])) return fprintf(stderr, "%s\n", loom_errmsg()), 1;
  bool qwen = spec.vision.arch == LOOM_VISION_QWEN;
  int side = qwen ? 8 : spec.vision.image_size / spec.vision.patch;
  int grid[2][3] = {{1, side, side}, {1, qwen ? 4 : side, side}};
  int row[2] = {0, 1}, at[2] = {3, 5}, P = 0, ntok[2];
  for (int i = 0; i < 2; i++) {
    P += grid[i][0] * grid[i][1] * grid[i][2];
    ntok[i] = loom_vision_tokens(&spec.vision, grid[i][0], grid[i][1], grid[i][2]);
  }
  loom_decoder *d;
  loom_vision *v;
  if (loom_decoder_create(&d, &spec, B, T, false, false) || loom_vision_create(&v, d, P))
    return fprintf(stderr, "%s\n", loom_errmsg()), 1;
  loom_decoder_init_params(d, 9);
  loom_rng rng;
  loom_rng_seed(&rng, 3);
  for (int i = 0; i < d->layout.count; i++) {
    const loom_param *p = &d->layout.params[i];
    if (p->ndim == 1)
      for (size_t j = 0; j < p->numel; j++) d->params[p->offset + j] += (float)(0.1 * loom_rng_normal(&rng));
  }
  int pv = loom_vision_patch_values(&spec.vision), C = spec.hidden;
  float *pixels = malloc((size_t)P * pv * sizeof(float));
  for (size_t i = 0; i < (size_t)P * pv; i++) pixels[i] = (float)loom_rng_normal(&rng);
  int32_t tokens[B * T], targets[B * T], pos[3 * B * T];
  int slot[B * T];
  for (int i = 0; i < B * T; i++) {
    tokens[i] = (int32_t)loom_rng_below(&rng, (uint64_t)spec.vocab_size);
    targets[i] = loom_rng_uniform(&rng) < 0.5 ? LOOM_IGNORE_INDEX
                                               : (int32_t)loom_rng_below(&rng, (uint64_t)spec.vocab_size);
    slot[i] = -1;
  }
  /* image tokens and multimodal positions: text counts up; an image's tokens sit at
   * t0 + (0, row, col) of its merged grid; the text after it restarts at their max + 1 */
  int n = 0;
  for (int b = 0; b < B; b++) {
    int img = b, merge = spec.vision.merge, gh = grid[img][1] / merge, gw = grid[img][2] / merge;
    int p = 0;
    for (int t = 0; t < T;) {
      if (t == at[img] && row[img] == b) {
        for (int k = 0; k < ntok[img]; k++, t++) {
          slot[b * T + t] = n++;
          pos[0 * B * T + b * T + t] = p;
          pos[1 * B * T + b * T + t] = p + k / gw;
          pos[2 * B * T + b * T + t] = p + k % gw;
        }
        p += (gh > gw ? gh : gw);
        continue;
      }
      for (int s = 0; s < 3; s++) pos[s * B * T + b * T + t] = p;
      p++, t++;
    }
  }
  float *feat = malloc((size_t)n * C * sizeof(float)), *dfeat = calloc((size_t)n * C, sizeof(float));
  loom_vision_input in = {2, (const int(*)[3])grid, pixels, P};
  loom_decoder_zero_grads(d);
  if (loom_vision_forward(v, &in, feat)) return fprintf(stderr, "%s\n", loom_errmsg()), 1;
  loom_acts *a = loom_decoder_slot_get(d, 0, 0);
  a->mrope_pos = qwen ? pos : NULL;
  a->inject_slot = slot, a->inject_feats = feat, a->inject_grads = dfeat;
  double loss_sum;
  int count;
  loom_decoder_forward_chunk(d, a, tokens, targets, &loss_sum, &count);
  float loss = (float)(loss_sum / count);
  loom_decoder_backward_chunk(d, a, NULL, NULL, 1.0f / (float)count);
  loom_vision_backward(v, dfeat);
  loom_st_writer *w = loom_st_writer_create();
  loom_st_writer_set_metadata(w, "preset", argv[2]);
  for (int i = 0; i < d->layout.count; i++) {
    const loom_param *p = &d->layout.params[i];
    int64_t shape[2] = {p->shape[0], p->shape[1]};
    char name[128];
    snprintf(name, sizeof name, "param.%s", p->name);
    loom_st_writer_add(w, name, LOOM_DT_F32, p->ndim, shape, d->params + p->offset);
    snprintf(name, sizeof name, "grad.%s", p->name);
    loom_st_writer_add(w, name, LOOM_DT_F32, p->ndim, shape, d->grads + p->offset);
  }
  int64_t ps[2] = {P, pv}, gs[2] = {2, 3}, bt[2] = {B, T}, ps3[3] = {3, B, T};
  int64_t ls[3] = {B, T, spec.padded_vocab}, one = 1;
  loom_st_writer_add(w, "pixels", LOOM_DT_F32, 2, ps, pixels);
  loom_st_writer_add(w, "grid", LOOM_DT_I32, 2, gs, grid);
  loom_st_writer_add(w, "tokens", LOOM_DT_I32, 2, bt, tokens);
  loom_st_writer_add(w, "targets", LOOM_DT_I32, 2, bt, targets);
  loom_st_writer_add(w, "slot", LOOM_DT_I32, 2, bt, slot);
  loom_st_writer_add(w, "positions", LOOM_DT_I32, 3, ps3, pos);
  loom_st_writer_add(w, "logits", LOOM_DT_F32, 3, ls, d->logits);
  loom_st_writer_add(w, "loss", LOOM_DT_F32, 1, &one, &loss);
  int rc = loom_st_writer_write(w, argv[1]);
  if (rc) fprintf(stderr, "%s\n", loom_errmsg());
  loom_st_writer_free(w);
  loom_vision_free(v);
  loom_decoder_free(d);
  free(pixels), free(feat), free(dfeat);
  return rc ? 1 : 0;
}
