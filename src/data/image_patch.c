/* Normalisation and patchify in Qwen2-VL's order, vision-token arithmetic, and the whole
 * JPEG -> (patches, 1176) pipeline. Values follow Hugging Face's slow processor: x * (1/255)
 * in double rounded to float32, then (x - mean) / std in float32. */
#include <stdlib.h>

#include "loom/core.h"
#include "loom/image.h"

const float loom_clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
const float loom_clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};

loom_vision_grid loom_vision_grid_of(int resized_h, int resized_w) {
  loom_vision_grid g;
  g.grid_t = 1;
  g.grid_h = resized_h / LOOM_IMG_PATCH;
  g.grid_w = resized_w / LOOM_IMG_PATCH;
  g.patches = (long)g.grid_t * g.grid_h * g.grid_w;
  g.tokens = g.patches / (LOOM_IMG_MERGE * LOOM_IMG_MERGE);
  return g;
}

int loom_vision_tokens_for(int h, int w, long min_pixels, long max_pixels, const char *where,
                           loom_vision_grid *g) {
  int rh, rw;
  if (loom_smart_resize(h, w, min_pixels, max_pixels, where, &rh, &rw)) return -1;
  *g = loom_vision_grid_of(rh, rw);
  return 0;
}

void loom_image_patchify(const loom_image *im, float *patches) {
  const int P = LOOM_IMG_PATCH, M = LOOM_IMG_MERGE, TP = LOOM_IMG_TEMPORAL;
  LOOM_ASSERT(im->h % (P * M) == 0 && im->w % (P * M) == 0);
  int gh = im->h / P, gw = im->w / P;
  float lut[3][256]; /* normalised value of each byte per channel */
  for (int c = 0; c < 3; c++)
    for (int v = 0; v < 256; v++) {
      float x = (float)((double)v * (1.0 / 255.0));
      lut[c][v] = (x - loom_clip_mean[c]) / loom_clip_std[c];
    }
  size_t row = 0;
  for (int bh = 0; bh < gh / M; bh++)
    for (int bw = 0; bw < gw / M; bw++)
      for (int mh = 0; mh < M; mh++)
        for (int mw = 0; mw < M; mw++, row++) {
          float *dst = patches + row * LOOM_IMG_PATCH_DIM;
          int y0 = (bh * M + mh) * P, x0 = (bw * M + mw) * P;
          for (int c = 0; c < 3; c++)
            for (int tt = 0; tt < TP; tt++)
              for (int py = 0; py < P; py++)
                for (int px = 0; px < P; px++)
                  *dst++ = lut[c][im->rgb[((size_t)(y0 + py) * im->w + x0 + px) * 3 + c]];
        }
}

int loom_image_prepare(const uint8_t *jpeg, size_t len, long min_pixels, long max_pixels,
                       const char *where, float **patches, loom_vision_grid *g, int *orig_w,
                       int *orig_h) {
  loom_image im, rs;
  int rh, rw;
  *patches = NULL;
  long limit = max_pixels > LOOM_IMG_MAX_DECODE_PIXELS ? max_pixels : LOOM_IMG_MAX_DECODE_PIXELS;
  if (loom_jpeg_decode_limit(jpeg, len, where, limit, &im)) return -1;
  if (orig_w) *orig_w = im.w;
  if (orig_h) *orig_h = im.h;
  if (loom_smart_resize(im.h, im.w, min_pixels, max_pixels, where, &rh, &rw)) {
    loom_image_free(&im);
    return -1;
  }
  if (rh == im.h && rw == im.w) {
    rs = im; /* PIL returns a copy when the size is unchanged */
  } else {
    int rc = loom_image_resize_bicubic(&im, rw, rh, &rs);
    loom_image_free(&im);
    if (rc) return -1;
  }
  *g = loom_vision_grid_of(rh, rw);
  *patches = loom_malloc((size_t)g->patches * LOOM_IMG_PATCH_DIM * sizeof(float));
  loom_image_patchify(&rs, *patches);
  loom_image_free(&rs);
  return 0;
}

int loom_image_prepare_fixed(const uint8_t *jpeg, size_t len, int size, const char *where,
                             float **patches, loom_vision_grid *g, int *orig_w, int *orig_h) {
  const int P = LOOM_IMG_PATCH;
  loom_image im, rs;
  *patches = NULL;
  if (size < P || size % P)
    return loom_err("%s: the encoder's image size %d px is not a positive multiple of %d", where,
                    size, P);
  long limit = (long)size * size > LOOM_IMG_MAX_DECODE_PIXELS ? (long)size * size
                                                              : LOOM_IMG_MAX_DECODE_PIXELS;
  if (loom_jpeg_decode_limit(jpeg, len, where, limit, &im)) return -1;
  if (orig_w) *orig_w = im.w;
  if (orig_h) *orig_h = im.h;
  if (im.w == size && im.h == size) {
    rs = im;
  } else {
    int rc = loom_image_resize_bicubic(&im, size, size, &rs);
    loom_image_free(&im);
    if (rc) return -1;
  }
  g->grid_t = 1;
  g->grid_h = g->grid_w = size / P;
  g->patches = (long)g->grid_h * g->grid_w;
  g->tokens = g->patches;
  *patches = loom_malloc((size_t)g->patches * LOOM_IMG_PATCH_DIM_FIXED * sizeof(float));
  float lut[3][256];
  for (int c = 0; c < 3; c++)
    for (int v = 0; v < 256; v++) {
      float x = (float)((double)v * (1.0 / 255.0));
      lut[c][v] = (x - loom_clip_mean[c]) / loom_clip_std[c];
    }
  float *dst = *patches;
  for (int ph = 0; ph < g->grid_h; ph++)
    for (int pw = 0; pw < g->grid_w; pw++)
      for (int c = 0; c < 3; c++)
        for (int py = 0; py < P; py++)
          for (int px = 0; px < P; px++)
            *dst++ = lut[c][rs.rgb[((size_t)(ph * P + py) * size + pw * P + px) * 3 + c]];
  loom_image_free(&rs);
  return 0;
}
