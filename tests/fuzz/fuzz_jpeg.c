/* Fuzz harness: JPEG images through the vision data pipeline: header size, decode (the
 * decompression-bomb limit), Qwen's smart_resize + bicubic resize + patchify, and the
 * LLaVA-style fixed-size path. Invariants beyond memory safety: the decoded size equals the
 * header's, stays within LOOM_IMG_MAX_DECODE_PIXELS, and the patch grid matches the
 * resized size. */
#include "fuzz_util.h"
#include "loom/core.h"
#include "loom/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int w = 0, h = 0;
  int have_size = loom_jpeg_size(data, size, "fuzz", &w, &h) == 0;
  loom_image im;
  if (loom_jpeg_decode(data, size, "fuzz", &im) == 0) {
    if (!have_size || im.w != w || im.h != h)
      FUZZ_FINDING("decoded %dx%d but the header says %dx%d", im.w, im.h, w, h);
    if ((long)im.w * im.h > LOOM_IMG_MAX_DECODE_PIXELS)
      FUZZ_FINDING("decoded %dx%d, above the %ld-pixel limit", im.w, im.h,
                   (long)LOOM_IMG_MAX_DECODE_PIXELS);
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
  }
  return 0;
}
