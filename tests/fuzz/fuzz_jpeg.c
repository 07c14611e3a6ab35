/* Fuzz harness: JPEG images through the vision data pipeline: header size, decode (the
 * decompression-bomb limit), Qwen's smart_resize + bicubic resize + patchify, and the
 * LLaVA-style fixed-size path. Invariants beyond memory safety: a header above
 * LOOM_IMG_MAX_DECODE_PIXELS is refused by loom_jpeg_decode; a decoded image has the
 * header's size and stays within the limit it was decoded under; the patch grid matches the
 * resized size. Time: a few hundred bytes of arithmetic-coded data legitimately hold a
 * uniform 8192 x 8192 image, whose decode takes seconds under ASan; so this harness decodes
 * under a limit of 2^20 pixels (the same code path as the 2^26 default, with another
 * number) and runs the resize pipelines only on images that fit it. */
#include "fuzz_util.h"
#include "loom/core.h"
#include "loom/image.h"

#define FUZZ_MAX_PIXELS (1L << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int w = 0, h = 0;
  int have_size = loom_jpeg_size(data, size, "fuzz", &w, &h) == 0;
  long declared = have_size ? (long)w * h : 0;
  loom_image im;
  if (declared > LOOM_IMG_MAX_DECODE_PIXELS) { /* refused from the header: cheap */
    if (loom_jpeg_decode(data, size, "fuzz", &im) == 0)
      FUZZ_FINDING("a %dx%d header passed the %ld-pixel limit", w, h,
                   (long)LOOM_IMG_MAX_DECODE_PIXELS);
    return 0;
  }
  if (loom_jpeg_decode_limit(data, size, "fuzz", FUZZ_MAX_PIXELS, &im)) {
    if (declared > FUZZ_MAX_PIXELS && !strstr(loom_errmsg(), "above the limit"))
      FUZZ_FINDING("a %dx%d header was refused for another reason: %s", w, h, loom_errmsg());
    return 0;
  }
  if (!have_size || im.w != w || im.h != h)
    FUZZ_FINDING("decoded %dx%d but the header says %dx%d", im.w, im.h, w, h);
  if ((long)im.w * im.h > FUZZ_MAX_PIXELS)
    FUZZ_FINDING("decoded %dx%d, above the %ld-pixel limit", im.w, im.h, FUZZ_MAX_PIXELS);
  loom_image_free(&im);
  float *patches = NULL;
  loom_vision_grid g;
  int ow, oh;
  if (loom_image_prepare(data, size, 3136, 28L * 28 * 16, "fuzz", &patches, &g, &ow, &oh) == 0) {
    if (g.grid_t != 1 || g.patches != (long)g.grid_h * g.grid_w || g.tokens * 4 != g.patches ||
        g.patches * 196 > 28L * 28 * 16)
      FUZZ_FINDING("grid %dx%dx%d, %ld patches, %ld tokens for a %dx%d image", g.grid_t,
                   g.grid_h, g.grid_w, g.patches, g.tokens, ow, oh);
    free(patches);
  }
  if (loom_image_prepare_fixed(data, size, 28, "fuzz", &patches, &g, &ow, &oh) == 0) {
    if (g.patches != 4 || g.tokens != 4)
      FUZZ_FINDING("fixed 28 px: %ld patches, %ld tokens", g.patches, g.tokens);
    free(patches);
  }
  return 0;
}
