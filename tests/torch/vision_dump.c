/* loom_vision_dump: runs loom's vision encoder on random weights and random patches of a few
 * images, with loss L = sum(out * R) for a random R, and writes parameters, inputs, output and
 * every vision.* gradient to one safetensors file for check_vision.py.
 *
 * usage: loom_vision_dump OUT.safetensors PRESET [bf16] */
#include <stdio.h>
#include <stdlib.h>

#include "loom/decoder.h"
#include "loom/safetensors.h"
#include "loom/vision.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: loom_vision_dump OUT.safetensors PRESET [bf16]\n");
    return 2;
  }
  loom_model_spec spec;
  if (loom_model_preset(&spec, argv[2])) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 1;
  }
  bool bf16 = argc > 3 && !strcmp(argv[3], "bf16");
  bool qwen = spec.vision.arch == LOOM_VISION_QWEN;
  int grid[3][3] = {{1, 8, 12}, {1, 6, 4}, {1, 4, 4}};
  int n_img = 3;
  if (!qwen) { /* llava: fixed-size images */
    int side = spec.vision.image_size / spec.vision.patch;
    for (int i = 0; i < n_img; i++) grid[i][0] = 1, grid[i][1] = side, grid[i][2] = side;
  }
  int P = 0;
  for (int i = 0; i < n_img; i++) P += grid[i][0] * grid[i][1] * grid[i][2];
  int pv = loom_vision_patch_values(&spec.vision), M = 0;
  for (int i = 0; i < n_img; i++) M += loom_vision_tokens(&spec.vision, grid[i][0], grid[i][1], grid[i][2]);
  loom_decoder *d;
  loom_vision *v;
  if (loom_decoder_create(&d, &spec, 1, 4, bf16, false) || loom_vision_create(&v, d, P)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 1;
  }
  loom_decoder_init_params(d, 5);
  loom_rng rng;
  loom_rng_seed(&rng, 77);
  for (int i = 0; i < d->layout.count; i++) { /* give norms and biases signal too */
    const loom_param *p = &d->layout.params[i];
    if (p->ndim == 1)
      for (size_t j = 0; j < p->numel; j++) d->params[p->offset + j] += (float)(0.1 * loom_rng_normal(&rng));
  }
  loom_decoder_params_updated(d);
  float *pixels = malloc((size_t)P * pv * sizeof(float));
  for (size_t i = 0; i < (size_t)P * pv; i++) pixels[i] = (float)loom_rng_normal(&rng);
  int Ct = spec.hidden;
  float *out = malloc((size_t)M * Ct * sizeof(float)), *R = malloc((size_t)M * Ct * sizeof(float));
  for (size_t i = 0; i < (size_t)M * Ct; i++) R[i] = (float)loom_rng_normal(&rng);
  loom_vision_input in = {n_img, (const int(*)[3])grid, pixels, P};
  loom_decoder_zero_grads(d);
  if (loom_vision_forward(v, &in, out)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 1;
  }
  loom_vision_backward(v, R);
  loom_st_writer *w = loom_st_writer_create();
  loom_st_writer_set_metadata(w, "preset", argv[2]);
  loom_st_writer_set_metadata(w, "dtype", bf16 ? "bf16" : "fp32");
  char meta[64];
  snprintf(meta, sizeof meta, "%d", spec.hidden);
  loom_st_writer_set_metadata(w, "text_hidden", meta);
  for (int i = 0; i < d->layout.count; i++) {
    const loom_param *p = &d->layout.params[i];
    if (strncmp(p->name, "vision.", 7)) continue;
    int64_t shape[2] = {p->shape[0], p->shape[1]};
    char name[128];
    snprintf(name, sizeof name, "param.%s", p->name);
    loom_st_writer_add(w, name, LOOM_DT_F32, p->ndim, shape, d->params + p->offset);
    snprintf(name, sizeof name, "grad.%s", p->name);
    loom_st_writer_add(w, name, LOOM_DT_F32, p->ndim, shape, d->grads + p->offset);
  }
  int64_t ps[2] = {P, pv}, gs[2] = {n_img, 3}, os[2] = {M, Ct};
  loom_st_writer_add(w, "pixels", LOOM_DT_F32, 2, ps, pixels);
  loom_st_writer_add(w, "grid", LOOM_DT_I32, 2, gs, grid);
  loom_st_writer_add(w, "out", LOOM_DT_F32, 2, os, out);
  loom_st_writer_add(w, "R", LOOM_DT_F32, 2, os, R);
  int rc = loom_st_writer_write(w, argv[1]);
  if (rc) fprintf(stderr, "%s\n", loom_errmsg());
  loom_st_writer_free(w);
  loom_vision_free(v);
  loom_decoder_free(d);
  free(pixels), free(out), free(R);
  return rc ? 1 : 0;
}
