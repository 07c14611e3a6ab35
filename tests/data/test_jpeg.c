/* JPEG codec (libjpeg-turbo): encode/decode round trip within JPEG tolerance, header-only
 * size, and errors for data that is not a JPEG, a corrupt header, truncated data and
 * corrupt entropy-coded data — each naming the sample and never exiting the process. */
#include <stdlib.h>

#include "harness.h"
#include "loom/core.h"
#include "loom/image.h"

static loom_image gradient(int w, int h) {
  loom_image im = {w, h, malloc((size_t)w * h * 3)};
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      uint8_t *p = im.rgb + ((size_t)y * w + x) * 3;
      p[0] = (uint8_t)(x * 255 / (w - 1));
      p[1] = (uint8_t)(y * 255 / (h - 1));
      p[2] = (uint8_t)((x + y) * 127 / (w + h));
    }
  return im;
}

static void round_trip(void) {
  loom_image im = gradient(97, 61), out;
  uint8_t *jpg;
  size_t len;
  CHECK(loom_jpeg_encode(&im, 95, &jpg, &len) == 0, "encode: %s", loom_errmsg());
  CHECK(len > 100 && jpg[0] == 0xFF && jpg[1] == 0xD8, "JPEG starts with SOI (%zu bytes)", len);
  int w = 0, h = 0;
  CHECK(loom_jpeg_size(jpg, len, "rt", &w, &h) == 0 && w == 97 && h == 61, "size %dx%d", w, h);
  CHECK(loom_jpeg_decode(jpg, len, "rt", &out) == 0, "decode: %s", loom_errmsg());
  CHECK(out.w == 97 && out.h == 61, "decoded %dx%d", out.w, out.h);
  double sum = 0;
  int worst = 0;
  for (size_t i = 0; i < (size_t)97 * 61 * 3; i++) {
    int d = abs((int)out.rgb[i] - (int)im.rgb[i]);
    sum += d;
    if (d > worst) worst = d;
  }
  double mean = sum / (97.0 * 61 * 3);
  CHECK(mean < 2.0 && worst <= 24, "round trip within JPEG tolerance: mean %.2f max %d", mean,
        worst);
  /* quality matters: q=10 is visibly worse than q=95 but still decodes */
  uint8_t *low;
  size_t llen;
  CHECK(loom_jpeg_encode(&im, 10, &low, &llen) == 0 && llen < len, "q10 smaller (%zu < %zu)",
        llen, len);
  free(low);

  /* truncated: half of the file -> "Premature end of JPEG file" is an error, not a warning */
  loom_image t;
  CHECK(loom_jpeg_decode(jpg, len / 2, "shard a.tar, sample 7", &t) != 0, "truncated JPEG fails");
  const char *m = loom_errmsg();
  CHECK(strstr(m, "shard a.tar, sample 7") && strstr(m, "truncated"), "message: %s", m);
  CHECK(t.rgb == NULL, "no image on failure");

  /* corrupt entropy data: overwrite the middle of the scan with a marker-like pattern */
  uint8_t *bad = malloc(len);
  memcpy(bad, jpg, len);
  for (size_t i = len / 2; i < len / 2 + 64; i += 2) bad[i] = 0xFF, bad[i + 1] = 0xD9;
  CHECK(loom_jpeg_decode(bad, len, "shard b.tar, sample 9", &t) != 0, "corrupt data fails");
  CHECK(strstr(loom_errmsg(), "sample 9") != NULL, "message: %s", loom_errmsg());

  /* corrupt header: break the SOF0 marker's length field */
  memcpy(bad, jpg, len);
  for (size_t i = 2; i + 3 < len; i++)
    if (bad[i] == 0xFF && (bad[i + 1] == 0xC0 || bad[i + 1] == 0xC2)) {
      bad[i + 2] = 0, bad[i + 3] = 1;
      break;
    }
  CHECK(loom_jpeg_decode(bad, len, "hdr", &t) != 0, "corrupt SOF fails");
  CHECK(loom_jpeg_size(bad, len, "hdr", &w, &h) != 0, "corrupt SOF fails in size too: %s",
        loom_errmsg());
  free(bad);
  free(jpg);
  loom_image_free(&out);
  loom_image_free(&im);
}

static void not_jpeg(void) {
  loom_image t;
  const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13};
  CHECK(loom_jpeg_decode(png, sizeof png, "anno.json entry 3", &t) != 0, "PNG bytes refused");
  CHECK(strstr(loom_errmsg(), "not a JPEG") && strstr(loom_errmsg(), "entry 3"), "msg: %s",
        loom_errmsg());
  CHECK(loom_jpeg_decode(png, 0, "empty", &t) != 0, "empty refused");
  const uint8_t soi_only[] = {0xFF, 0xD8, 0xFF, 0xD9};
  CHECK(loom_jpeg_decode(soi_only, sizeof soi_only, "soi", &t) != 0, "SOI+EOI refused: %s",
        loom_errmsg());
}

int main(void) {
  round_trip();
  not_jpeg();
  return harness_finish("test_jpeg");
}
