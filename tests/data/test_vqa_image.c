/* Image sizes and patches: the seed's vision-token grid (448..3584 px -> 1k..64k patches ->
 * 256..16k merged tokens), Qwen's smart_resize rules (rounding ties to even, min/max pixels,
 * minimum side, aspect ratio), the patch order (2x2 merge blocks contiguous), normalisation,
 * bicubic resize basics, and the whole pipeline's errors. */
#include <stdlib.h>

#include "harness.h"
#include "loom/core.h"
#include "loom/image.h"

static void seed_grid(void) {
  /* the seed's experiment grid: image side -> patches (vision encoder sequence) -> tokens */
  static const struct {
    int side;
    long patches, tokens;
  } grid[] = {{448, 1024, 256},     {896, 4096, 1024},    {1344, 9216, 2304},
              {1792, 16384, 4096},  {2240, 25600, 6400},  {3584, 65536, 16384}};
  printf("side px   patches  tokens (max_pixels unlimited)\n");
  for (size_t i = 0; i < sizeof grid / sizeof *grid; i++) {
    loom_vision_grid g;
    int s = grid[i].side;
    CHECK(loom_vision_tokens_for(s, s, 3136, 1L << 40, "grid", &g) == 0, "%s", loom_errmsg());
    printf("%5d %10ld %7ld\n", s, g.patches, g.tokens);
    CHECK(g.patches == grid[i].patches && g.tokens == grid[i].tokens && g.grid_t == 1 &&
              g.grid_h == s / 14 && g.grid_w == s / 14,
          "%dx%d -> %ld patches, %ld tokens (want %ld, %ld)", s, s, g.patches, g.tokens,
          grid[i].patches, grid[i].tokens);
  }
  loom_vision_grid g = loom_vision_grid_of(448, 448);
  CHECK(g.patches == 1024 && g.tokens == 256, "448x448 -> 1024 -> 256");
}

static void rules(void) {
  static const struct {
    int h, w;
    long mn, mx;
    int rh, rw;
  } c[] = {
      {3584, 3584, 3136, 1003520, 980, 980},  /* Qwen's default max: downscaled, floor */
      {3000, 4000, 3136, 1003520, 840, 1148}, /* aspect kept, floor to multiples of 28 */
      {42, 70, 0, 1L << 40, 56, 56},          /* 1.5 -> 2 and 2.5 -> 2: ties to even */
      {98, 28, 0, 1L << 40, 112, 28},         /* 3.5 -> 4 */
      {40, 30, 3136, 1003520, 84, 56},        /* below min_pixels: upscaled, ceil */
      {28, 28, 3136, 1003520, 56, 56},        /* the smallest accepted image */
      {28, 5600, 3136, 1003520, 28, 5600},    /* aspect ratio 200 is allowed */
      {50, 75, 3136, 1003520, 56, 84},
      {1000, 37, 3136, 1003520, 1008, 28},
  };
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    int rh = 0, rw = 0;
    int rc = loom_smart_resize(c[i].h, c[i].w, c[i].mn, c[i].mx, "t", &rh, &rw);
    CHECK(rc == 0 && rh == c[i].rh && rw == c[i].rw, "smart_resize(%d, %d, %ld, %ld) = (%d, %d), "
          "want (%d, %d) %s", c[i].h, c[i].w, c[i].mn, c[i].mx, rh, rw, c[i].rh, c[i].rw,
          rc ? loom_errmsg() : "");
    CHECK(rh % 28 == 0 && rw % 28 == 0 && (long)rh * rw <= c[i].mx, "multiples of 28 within max");
  }
  int rh, rw;
  CHECK(loom_smart_resize(27, 500, 3136, 1003520, "shard x.tar, sample 5", &rh, &rw) != 0,
        "27 px side refused");
  CHECK(strstr(loom_errmsg(), "below the minimum size") && strstr(loom_errmsg(), "sample 5") &&
            strstr(loom_errmsg(), "500x27"), "msg: %s", loom_errmsg());
  CHECK(loom_smart_resize(28, 5629, 3136, 1003520, "wide", &rh, &rw) != 0, "ratio 201 refused");
  CHECK(strstr(loom_errmsg(), "aspect ratio") != NULL, "msg: %s", loom_errmsg());
  CHECK(loom_smart_resize(100, 100, 5000, 4000, "x", &rh, &rw) != 0, "min > max refused");
  CHECK(loom_smart_resize(100, 100, 0, 100, "x", &rh, &rw) != 0, "max below 28*28 refused");
}

/* Pixel (y, x, c) holds a value that encodes its position, so each patch value tells where
 * it came from. */
static void patch_order(void) {
  int W = 56, H = 84; /* 4 x 6 patches, 2 x 3 merge blocks */
  loom_image im = {W, H, malloc((size_t)W * H * 3)};
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int c = 0; c < 3; c++) im.rgb[((size_t)y * W + x) * 3 + c] = (uint8_t)((y * 3 + x + c * 50) % 256);
  loom_vision_grid g = loom_vision_grid_of(H, W);
  CHECK(g.grid_h == 6 && g.grid_w == 4 && g.patches == 24 && g.tokens == 6, "grid");
  float *p = malloc((size_t)g.patches * LOOM_IMG_PATCH_DIM * sizeof(float));
  loom_image_patchify(&im, p);
  int bad = 0;
  for (int row = 0; row < 24; row++) {
    int blk = row / 4, m = row % 4, bh = blk / 2, bw = blk % 2, mh = m / 2, mw = m % 2;
    for (int col = 0; col < LOOM_IMG_PATCH_DIM; col++) {
      int c = col / 392, tt = (col / 196) % 2, py = (col / 14) % 14, px = col % 14;
      (void)tt;
      int y = (bh * 2 + mh) * 14 + py, x = (bw * 2 + mw) * 14 + px;
      float v = (float)((double)im.rgb[((size_t)y * W + x) * 3 + c] * (1.0 / 255.0));
      float want = (v - loom_clip_mean[c]) / loom_clip_std[c];
      if (p[(size_t)row * LOOM_IMG_PATCH_DIM + col] != want) bad++;
    }
  }
  CHECK(bad == 0, "%d patch values out of place (row = block*4 + mh*2 + mw; col = (c*2+t)*196 "
        "+ py*14 + px)", bad);
  /* the two temporal copies are identical */
  CHECK(!memcmp(p, p + 196, 196 * sizeof(float)), "temporal copies equal");
  /* a white pixel normalises to (1 - mean) / std */
  CHECK_CLOSE((1.0f - loom_clip_mean[0]) / loom_clip_std[0], 1.9303361, 1e-6, "white R");
  free(p);
  loom_image_free(&im);
}

static void resize_basics(void) {
  loom_image im = {37, 23, malloc(37 * 23 * 3)}, out;
  memset(im.rgb, 77, 37 * 23 * 3);
  CHECK(loom_image_resize_bicubic(&im, 84, 56, &out) == 0, "upscale");
  int ok = 1;
  for (size_t i = 0; i < 84 * 56 * 3; i++) ok &= out.rgb[i] == 77;
  CHECK(ok, "a constant image stays constant when upscaled");
  loom_image_free(&out);
  CHECK(loom_image_resize_bicubic(&im, 28, 28, &out) == 0, "downscale");
  ok = 1;
  for (size_t i = 0; i < 28 * 28 * 3; i++) ok &= out.rgb[i] == 77;
  CHECK(ok, "a constant image stays constant when downscaled");
  loom_image_free(&out);
  loom_image_free(&im);
}

static void pipeline_errors(void) {
  loom_image im = {20, 20, calloc(20 * 20 * 3, 1)};
  uint8_t *jpg;
  size_t len;
  float *p;
  loom_vision_grid g;
  loom_jpeg_encode(&im, 90, &jpg, &len);
  CHECK(loom_image_prepare(jpg, len, 3136, 1003520, "shard s.tar, sample 00000003", &p, &g, NULL,
                           NULL) != 0, "20x20 image refused");
  CHECK(strstr(loom_errmsg(), "below the minimum size") && strstr(loom_errmsg(), "00000003"),
        "msg: %s", loom_errmsg());
  CHECK(p == NULL, "no patches on failure");
  free(jpg);
  loom_image_free(&im);
  loom_image big = {60, 40, calloc(60 * 40 * 3, 1)};
  loom_jpeg_encode(&big, 90, &jpg, &len);
  int w, h;
  CHECK(loom_image_prepare(jpg, len, 3136, 1003520, "ok", &p, &g, &w, &h) == 0, "%s",
        loom_errmsg());
  CHECK(w == 60 && h == 40 && g.grid_h == 4 && g.grid_w == 6 && g.tokens == 6,
        "60x40 -> 84x56 -> 6 tokens (got %dx%d grid %dx%d)", w, h, g.grid_w, g.grid_h);
  free(p);
  free(jpg);
  loom_image_free(&big);
}

int main(void) {
  seed_grid();
  rules();
  patch_order();
  resize_basics();
  pipeline_errors();
  return harness_finish("test_vqa_image");
}
