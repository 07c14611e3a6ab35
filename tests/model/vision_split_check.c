/* The vision encoder split over its own ranks (tensor parallel and/or Ulysses) against the
 * whole encoder in one process, run under mpirun by vlm_equivalence_test.sh:
 *   vision_split_check PRESET TP SP [ring]
 * (ring: the SP ranks are a context-parallel ring: the same patch slices, attention by the
 * segment ring instead of the Ulysses all-to-all; run by cp_equivalence_test.sh)
 * Every rank builds the reference (whole model, encoder replicated) and its shard of the
 * vision module from the same seed, encodes the same images (grids chosen so that the patch
 * count is not a multiple of sp * merge^2 for Qwen: the padding path runs), back-propagates
 * the same random token gradient, and compares: the tokens (every rank holds all of them)
 * and every gradient slice (summed over the sp ranks, whose patch slices contribute partial
 * sums). Tolerance: 1e-5 relative to the largest reference value of each tensor — the split
 * only reorders fp32 sums (~1e-7 relative each), a missing reduction or wrong slice is O(1)
 * (LLaVA's key bias, whose exact gradient is zero, is measured against its layer's value bias).
 * Exit status 0 when every check passes; one line per failure on stderr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/mesh.h"
#include "loom/vision.h"
#include "model/decoder_internal.h"

#define TOL 1e-5

static int failures;

/* scale > 0: relative to it instead of the reference's own largest value */
static void compare(const char *what, const float *got, const float *want, size_t n, int rank,
                    double scale) {
  double worst = 0;
  if (scale <= 0)
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
  scale = fmax(scale, 1e-30);
  for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(got[i] - want[i]) / scale);
  if (worst > TOL || worst != worst) {
    fprintf(stderr, "FAIL rank %d: %s differs by %.3e relative (tolerance %.0e)\n", rank, what,
            worst, TOL);
    failures++;
  }
}

/* The reference slice of a split tensor: rows or columns [start, start + local). */
static void slice_of(const loom_param *full, const loom_param *part, const float *src, float *dst) {
  int rows = part->shape[0], cols = part->ndim > 1 ? part->shape[1] : 1;
  int fcols = full->ndim > 1 ? full->shape[1] : 1;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      int fr = part->split_dim == 0 ? r + part->split_start : r;
      int fc = part->split_dim == 1 ? c + part->split_start : c;
      dst[(size_t)r * cols + c] = src[(size_t)fr * fcols + fc];
    }
}

int main(int argc, char **argv) {
  if (loom_dist_init(&argc, &argv) || argc < 4 || argc > 5 ||
      (argc == 5 && strcmp(argv[4], "ring"))) {
    fprintf(stderr, "usage: mpirun -np TP*SP %s PRESET TP SP [ring]\n", argv[0]);
    return 2;
  }
  loom_model_spec spec;
  if (loom_model_preset(&spec, argv[1])) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 2;
  }
  int tp = atoi(argv[2]), sp = atoi(argv[3]);
  loom_mesh m;
  if (loom_mesh_create_on(&m, 1, 1, 1, sp, tp, 60, 0)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 2;
  }
  const loom_vision_spec *vs = &spec.vision;
  bool qwen = vs->arch == LOOM_VISION_QWEN;
  int side = vs->image_size / vs->patch;
  int grids[3][3] = {{1, 4, 6}, {1, 8, 8}, {1, 2, 2}}; /* Qwen: 24 + 64 + 4 = 92 patches */
  int n_images = 3;
  if (!qwen)
    for (int i = 0; i < n_images; i++) grids[i][1] = grids[i][2] = side;
  int P = 0, M = 0;
  for (int i = 0; i < n_images; i++) {
    P += grids[i][0] * grids[i][1] * grids[i][2];
    M += loom_vision_tokens(vs, grids[i][0], grids[i][1], grids[i][2]);
  }
  int pv = loom_vision_patch_values(vs), Ct = spec.hidden;
  float *pixels = malloc((size_t)P * pv * sizeof(float));
  float *dout = malloc((size_t)M * Ct * sizeof(float));
  float *ref = malloc((size_t)M * Ct * sizeof(float)), *out = malloc((size_t)M * Ct * sizeof(float));
  loom_rng rng;
  loom_rng_seed(&rng, 99);
  for (size_t i = 0; i < (size_t)P * pv; i++) pixels[i] = (float)loom_rng_normal(&rng);
  for (size_t i = 0; i < (size_t)M * Ct; i++) dout[i] = (float)loom_rng_normal(&rng);
  loom_vision_input in = {n_images, (const int(*)[3])grids, pixels, P};

  loom_decoder *full, *part;
  loom_vision *vfull, *vpart;
  loom_shard sh;
  memset(&sh, 0, sizeof sh);
  sh.module = LOOM_MODULE_VISION;
  sh.tp = tp, sh.tp_rank = m.tp_rank, sh.sp = sp, sh.sp_rank = m.sp_rank;
  if (loom_decoder_create(&full, &spec, 1, 1, false, false) ||
      loom_vision_create(&vfull, full, P) ||
      loom_decoder_create_shard(&part, &spec, &sh, 1, sp, false, false, 1, &m.tp_comm, &m.sp_comm, NULL) ||
      loom_vision_create_parallel(&vpart, part, P, &m.tp_comm, &m.sp_comm, argc == 5)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 2;
  }
  loom_decoder_init_params(full, 5);
  loom_decoder_init_params(part, 5);
  loom_decoder_zero_grads(full);
  loom_decoder_zero_grads(part);
  if (loom_vision_forward(vfull, &in, ref) || loom_vision_forward(vpart, &in, out)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 2;
  }
  compare("vision tokens", out, ref, (size_t)M * Ct, m.rank, 0);
  loom_vision_backward(vfull, dout);
  loom_vision_backward(vpart, dout);
  int checked = 0;
  for (int i = 0; i < part->layout.count; i++) {
    const loom_param *p = &part->layout.params[i];
    const loom_param *f = loom_param_find(&full->layout, p->name);
    if (!f) {
      fprintf(stderr, "FAIL rank %d: %s missing from the whole model\n", m.rank, p->name);
      failures++;
      continue;
    }
    float *g = part->grads + p->offset, *want = malloc(p->numel * sizeof(float));
    if (sp > 1) loom_comm_allreduce_f32(&m.sp_comm, g, p->numel, LOOM_OP_SUM);
    if (p->split_dim >= 0) slice_of(f, p, full->grads + f->offset, want);
    else memcpy(want, full->grads + f->offset, p->numel * sizeof(float));
    char what[128];
    snprintf(what, sizeof what, "gradient of %s", p->name);
    /* Without rotary positions (LLaVA) the key bias shifts every score of a row by the same
     * amount, which softmax ignores: its gradient is zero up to rounding, so it is compared
     * at the scale of the same layer's value-bias gradient instead of its own. */
    double scale = 0;
    const char *kb = strstr(p->name, "attn.k.bias");
    if (!qwen && kb) {
      char vb[96];
      snprintf(vb, sizeof vb, "%.*sattn.v.bias", (int)(kb - p->name), p->name);
      const loom_param *fv = loom_param_find(&full->layout, vb);
      for (size_t j = 0; fv && j < fv->numel; j++)
        scale = fmax(scale, fabs(full->grads[fv->offset + j]));
    }
    compare(what, g, want, p->numel, m.rank, scale);
    free(want);
    checked++;
  }
  if (m.rank == 0)
    printf("%s tp=%d sp=%d: %d patches, %d tokens, %d gradient tensors: %s\n", argv[1], tp, sp, P,
           M, checked, failures ? "FAILED" : "all within 1e-5");
  loom_vision_free(vfull);
  loom_vision_free(vpart);
  loom_decoder_free(full);
  loom_decoder_free(part);
  free(pixels), free(dout), free(ref), free(out);
  loom_mesh_free(&m);
  loom_dist_finalize();
  return failures ? 1 : 0;
}
