/* Per-batch tables of the Qwen2.5-VL vision encoder: the window order of merged units (as
 * Qwen's get_window_index), the attention segments of window and full-attention blocks, and
 * the 2D rotary table (height then width frequencies, as Qwen's rot_pos_emb) in window order.
 * LLaVA needs only one segment per image. */
#include <math.h>
#include <stdlib.h>

#include "model/vision_internal.h"

int loom_vision_tokens(const loom_vision_spec *s, int t, int h, int w) {
  return t * h * w / (s->merge * s->merge);
}

int vis_check_input(const loom_vision *v, const loom_vision_input *in) {
  const loom_vision_spec *s = &v->s;
  int P = 0;
  for (int i = 0; i < in->n_images; i++) {
    int t = in->grid[i][0], h = in->grid[i][1], w = in->grid[i][2];
    if (t < 1 || h < 1 || w < 1 || h % s->merge || w % s->merge)
      return loom_err("image %d: grid %dx%dx%d patches must be positive multiples of the merge "
                      "size %d", i, t, h, w, s->merge);
    if (s->arch == LOOM_VISION_LLAVA &&
        (t != 1 || h * s->patch != s->image_size || w * s->patch != s->image_size))
      return loom_err("image %d: the llava encoder takes %dx%d px images (%dx%d patches), got "
                      "%dx%d patches", i, s->image_size, s->image_size, s->image_size / s->patch,
                      s->image_size / s->patch, h, w);
    P += t * h * w;
  }
  if (P != in->n_patches)
    return loom_err("vision input: the grids hold %d patches but %d were given", P, in->n_patches);
  if (P > v->maxP)
    return loom_err("vision input: %d patches, more than the %d planned (raise the maximum "
                    "image size or lower the batch)", P, v->maxP);
  return 0;
}

/* Window order of merged units and the window segments (in patches). */
static void window_order(loom_vision *v, const loom_vision_input *in) {
  const loom_vision_spec *s = &v->s;
  int ws = s->window / s->merge / s->patch, unit = s->merge * s->merge;
  int n = 0, offset = 0;
  v->n_win = 0;
  v->seg_win[0] = 0;
  for (int img = 0; img < in->n_images; img++) {
    int t = in->grid[img][0], lh = in->grid[img][1] / s->merge, lw = in->grid[img][2] / s->merge;
    int nwh = (lh + ws - 1) / ws, nww = (lw + ws - 1) / ws;
    for (int tt = 0; tt < t; tt++)
      for (int wh = 0; wh < nwh; wh++)
        for (int ww = 0; ww < nww; ww++) {
          int count = 0;
          for (int i = 0; i < ws; i++)
            for (int j = 0; j < ws; j++) {
              int r = wh * ws + i, c = ww * ws + j;
              if (r >= lh || c >= lw) continue;
              v->unit_perm[n++] = offset + (tt * lh + r) * lw + c;
              count++;
            }
          if (count) {
            v->seg_win[v->n_win + 1] = v->seg_win[v->n_win] + count * unit;
            v->n_win++;
          }
        }
    offset += t * lh * lw;
  }
}

/* Patches P padded to Pg (a multiple of sp * merge^2): the padding forms one more segment of
 * both kinds, so real patches never attend to it; its rotary rows are the identity. */
static void pad_and_slice(loom_vision *v) {
  int unit = v->s.merge * v->s.merge, step = v->sp * unit, half = v->D / 2;
  v->Pg = (v->P + step - 1) / step * step;
  v->Mg = v->Pg / unit;
  v->Pl = v->Pg / v->sp;
  v->Ml = v->Pl / unit;
  v->p0 = v->sp_rank * v->Pl;
  if (v->Pg > v->P) {
    v->seg_win[v->n_win + 1] = v->Pg, v->n_win++;
    v->seg_full[v->n_full_seg + 1] = v->Pg, v->n_full_seg++;
  }
  if (v->s.arch != LOOM_VISION_QWEN) return;
  for (size_t i = (size_t)v->P * half; i < (size_t)v->Pg * half; i++) v->cosb[i] = 1, v->sinb[i] = 0;
}

void vis_prepare(loom_vision *v, const loom_vision_input *in) {
  const loom_vision_spec *s = &v->s;
  v->P = in->n_patches;
  v->M = v->P / (s->merge * s->merge);
  /* full-attention segments: one per image frame (patches stay contiguous in window order) */
  v->n_full_seg = 0;
  v->seg_full[0] = 0;
  for (int img = 0; img < in->n_images; img++)
    for (int tt = 0; tt < in->grid[img][0]; tt++) {
      v->seg_full[v->n_full_seg + 1] = v->seg_full[v->n_full_seg] + in->grid[img][1] * in->grid[img][2];
      v->n_full_seg++;
    }
  if (s->arch != LOOM_VISION_QWEN) {
    pad_and_slice(v);
    return;
  }
  window_order(v, in);
  /* 2D rotary table in window order: first D/4 frequencies by row, the next D/4 by column */
  int D = v->D, half = D / 2, quarter = D / 4, unit = s->merge * s->merge;
  int *hpos = loom_malloc((size_t)v->P * sizeof(int)), *wpos = loom_malloc((size_t)v->P * sizeof(int));
  int p = 0;
  for (int img = 0; img < in->n_images; img++) {
    int t = in->grid[img][0], h = in->grid[img][1], w = in->grid[img][2], m = s->merge;
    for (int tt = 0; tt < t; tt++)
      for (int bh = 0; bh < h / m; bh++)
        for (int bw = 0; bw < w / m; bw++)
          for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++, p++) hpos[p] = bh * m + i, wpos[p] = bw * m + j;
  }
  for (int u = 0; u < v->M; u++)
    for (int k = 0; k < unit; k++) {
      int dst = u * unit + k, src = v->unit_perm[u] * unit + k;
      for (int i = 0; i < half; i++) {
        int j = i < quarter ? i : i - quarter;
        double inv = pow(s->rope_theta, -(double)(2 * j) / (double)half);
        double angle = (i < quarter ? hpos[src] : wpos[src]) * inv;
        v->cosb[(size_t)dst * half + i] = cos(angle);
        v->sinb[(size_t)dst * half + i] = sin(angle);
      }
    }
  free(hpos);
  free(wpos);
  pad_and_slice(v);
}
