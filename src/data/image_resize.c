/* Qwen's smart_resize (target size: multiples of 28 within [min_pixels, max_pixels]) and a
 * bit-exact port of PIL's bicubic Image.resize for 8-bit RGB (libImaging/Resample.c):
 * separable convolution with the a = -0.5 cubic kernel widened by the downscale factor
 * (antialiasing), coefficients normalised then rounded to 22-bit fixed point, horizontal pass
 * first, each pass rounding and clipping to uint8. */
#include <math.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/image.h"

int loom_smart_resize(int h, int w, long min_pixels, long max_pixels, const char *where,
                      int *out_h, int *out_w) {
  const int f = LOOM_IMG_FACTOR;
  if (max_pixels < (long)f * f || min_pixels > max_pixels || min_pixels < 0)
    return loom_err("image pixel limits min_pixels=%ld max_pixels=%ld are invalid: need "
                    "0 <= min_pixels <= max_pixels and max_pixels >= %d (one 28x28 block)",
                    min_pixels, max_pixels, f * f);
  if (h < LOOM_IMG_MIN_SIDE || w < LOOM_IMG_MIN_SIDE)
    return loom_err("%s: image %dx%d (WxH) is below the minimum size of %d px on a side: use "
                    "larger images or drop this sample (data.skip_bad_samples: true skips it)",
                    where, w, h, LOOM_IMG_MIN_SIDE);
  double ratio = (double)(h > w ? h : w) / (double)(h > w ? w : h);
  if (ratio > LOOM_IMG_MAX_RATIO)
    return loom_err("%s: image %dx%d (WxH) has aspect ratio %.1f, above Qwen's limit of 200: "
                    "crop it or drop the sample", where, w, h, ratio);
  long hb = (long)nearbyint((double)h / f) * f; /* Python round(): ties to even */
  long wb = (long)nearbyint((double)w / f) * f;
  if (hb * wb > max_pixels) {
    double beta = sqrt((double)h * (double)w / (double)max_pixels);
    hb = (long)floor((double)h / beta / f) * f;
    wb = (long)floor((double)w / beta / f) * f;
    if (hb < f) hb = f;
    if (wb < f) wb = f;
  } else if (hb * wb < min_pixels) {
    double beta = sqrt((double)min_pixels / ((double)h * (double)w));
    hb = (long)ceil((double)h * beta / f) * f;
    wb = (long)ceil((double)w * beta / f) * f;
  }
  *out_h = (int)hb;
  *out_w = (int)wb;
  return 0;
}

/* ---- PIL bicubic ------------------------------------------------------------------------- */

#define PRECISION_BITS (32 - 8 - 2)

static double bicubic(double x) {
  const double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

/* Coefficients for resampling in_size -> out_size: bounds (out, 2) = (first, count),
 * kk (out, ksize) fixed-point. Returns ksize. */
static int coeffs(int in_size, int out_size, int **bounds_out, int32_t **kk_out) {
  double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
  double support = 2.0 * filterscale;
  int ksize = (int)ceil(support) * 2 + 1;
  int *bounds = loom_malloc((size_t)out_size * 2 * sizeof *bounds);
  double *k = loom_malloc((size_t)ksize * sizeof *k);
  int32_t *kk = loom_calloc((size_t)out_size * (size_t)ksize, sizeof *kk);
  for (int xx = 0; xx < out_size; xx++) {
    double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
    int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
    if (xmin < 0) xmin = 0;
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    for (int x = 0; x < xmax; x++) {
      double wgt = bicubic((x + xmin - center + 0.5) * ss);
      k[x] = wgt;
      ww += wgt;
    }
    for (int x = 0; x < xmax; x++) {
      double v = ww != 0.0 ? k[x] / ww : k[x];
      kk[(size_t)xx * ksize + x] =
          (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS) : 0.5 + v * (1 << PRECISION_BITS));
    }
    bounds[2 * xx] = xmin;
    bounds[2 * xx + 1] = xmax;
  }
  free(k);
  *bounds_out = bounds;
  *kk_out = kk;
  return ksize;
}

static inline uint8_t clip8(int32_t v) {
  v >>= PRECISION_BITS; /* arithmetic shift, as PIL's lookup table index */
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One pass along x (horizontal) or y (vertical) of an (h, w, 3) image. */
static void pass(const uint8_t *in, int in_w, int in_h, uint8_t *out, int out_w, int out_h,
                 int horizontal) {
  int *bounds;
  int32_t *kk;
  int ksize = coeffs(horizontal ? in_w : in_h, horizontal ? out_w : out_h, &bounds, &kk);
  for (int y = 0; y < out_h; y++)
    for (int x = 0; x < out_w; x++) {
      int o = horizontal ? x : y, first = bounds[2 * o], count = bounds[2 * o + 1];
      const int32_t *k = kk + (size_t)o * ksize;
      int32_t s[3] = {1 << (PRECISION_BITS - 1), 1 << (PRECISION_BITS - 1),
                      1 << (PRECISION_BITS - 1)};
      for (int j = 0; j < count; j++) {
        const uint8_t *p = horizontal ? in + ((size_t)y * in_w + first + j) * 3
                                      : in + ((size_t)(first + j) * in_w + x) * 3;
        for (int c = 0; c < 3; c++) s[c] += (int32_t)p[c] * k[j];
      }
      uint8_t *q = out + ((size_t)y * out_w + x) * 3;
      for (int c = 0; c < 3; c++) q[c] = clip8(s[c]);
    }
  free(bounds);
  free(kk);
}

int loom_image_resize_bicubic(const loom_image *in, int out_w, int out_h, loom_image *out) {
  if (out_w < 1 || out_h < 1 || in->w < 1 || in->h < 1)
    return loom_err("cannot resize a %dx%d image to %dx%d", in->w, in->h, out_w, out_h);
  size_t n = (size_t)out_w * out_h * 3;
  out->w = out_w;
  out->h = out_h;
  out->rgb = loom_malloc(n);
  const uint8_t *src = in->rgb;
  uint8_t *tmp = NULL;
  int cur_w = in->w;
  if (out_w != in->w) { /* horizontal first, as PIL */
    tmp = loom_malloc((size_t)out_w * in->h * 3);
    pass(in->rgb, in->w, in->h, tmp, out_w, in->h, 1);
    src = tmp;
    cur_w = out_w;
  }
  if (out_h != in->h)
    pass(src, cur_w, in->h, out->rgb, out_w, out_h, 0);
  else
    memcpy(out->rgb, src, n);
  free(tmp);
  return 0;
}
