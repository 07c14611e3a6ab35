/* JPEG decode and encode with libjpeg-turbo. An error manager with setjmp replaces libjpeg's
 * exit(): errors AND warnings (corrupt data, "Premature end of JPEG file" on truncated input)
 * jump back here and become loom errors naming the data ("shard X, sample K"). */
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <jpeglib.h> /* after stdio.h: it needs FILE and size_t */

#include "loom/core.h"
#include "loom/image.h"

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  char msg[JMSG_LENGTH_MAX];
} err_mgr;

static void on_error(j_common_ptr c) {
  err_mgr *e = (err_mgr *)c->err;
  (*c->err->format_message)(c, e->msg);
  longjmp(e->jump, 1);
}

/* Level -1 is a warning (corrupt data libjpeg would paper over): treat it as an error.
 * Levels >= 0 are trace messages: ignore. */
static void on_message(j_common_ptr c, int level) {
  if (level < 0) on_error(c);
}

static void init_err(err_mgr *e, struct jpeg_decompress_struct *d) {
  d->err = jpeg_std_error(&e->pub);
  e->pub.error_exit = on_error;
  e->pub.emit_message = on_message;
  e->msg[0] = 0;
}

static int check_input(const uint8_t *data, size_t len, const char *where) {
  if (len < 4 || data[0] != 0xFF || data[1] != 0xD8)
    return loom_err("%s: not a JPEG image (%zu bytes, no FFD8 start marker): store the image as "
                    "JPEG or remove the sample", where, len);
  if (len > (size_t)0xFFFFFFFFu) return loom_err("%s: JPEG of %zu bytes is too large", where, len);
  return 0;
}

int loom_jpeg_size(const uint8_t *data, size_t len, const char *where, int *w, int *h) {
  if (check_input(data, len, where)) return -1;
  struct jpeg_decompress_struct d;
  err_mgr e;
  init_err(&e, &d);
  if (setjmp(e.jump)) {
    jpeg_destroy_decompress(&d);
    return loom_err("%s: corrupt JPEG header: %s (re-encode the image or remove the sample)",
                    where, e.msg);
  }
  jpeg_create_decompress(&d);
  jpeg_mem_src(&d, data, (unsigned long)len);
  jpeg_read_header(&d, TRUE);
  *w = (int)d.image_width;
  *h = (int)d.image_height;
  jpeg_destroy_decompress(&d);
  return 0;
}

int loom_jpeg_decode(const uint8_t *data, size_t len, const char *where, loom_image *out) {
  return loom_jpeg_decode_limit(data, len, where, LOOM_IMG_MAX_DECODE_PIXELS, out);
}

int loom_jpeg_decode_limit(const uint8_t *data, size_t len, const char *where, long max_pixels,
                           loom_image *out) {
  out->w = out->h = 0;
  out->rgb = NULL;
  if (check_input(data, len, where)) return -1;
  struct jpeg_decompress_struct d;
  err_mgr e;
  uint8_t *volatile rgb = NULL;
  init_err(&e, &d);
  if (setjmp(e.jump)) {
    jpeg_destroy_decompress(&d);
    free(rgb);
    return loom_err("%s: corrupt or truncated JPEG: %s (re-encode the image or remove the "
                    "sample; data.skip_bad_samples: true skips such samples)", where, e.msg);
  }
  jpeg_create_decompress(&d);
  jpeg_mem_src(&d, data, (unsigned long)len);
  jpeg_read_header(&d, TRUE);
  /* A decompression bomb declares a huge size in a few bytes; refuse it before
   * jpeg_start_decompress (which allocates whole-image coefficient buffers for progressive
   * files) and before the RGB buffer. */
  uint64_t declared = (uint64_t)d.image_width * (uint64_t)d.image_height;
  if (declared > (uint64_t)max_pixels) {
    int dw = (int)d.image_width, dh = (int)d.image_height;
    jpeg_destroy_decompress(&d);
    return loom_err("%s: JPEG declares %dx%d (WxH) = %llu pixels, above the limit of %ld "
                    "pixels for a decoded image: downscale it (e.g. to 8192x8192 or less) or "
                    "remove the sample; data.skip_bad_samples: true skips such samples", where,
                    dw, dh, (unsigned long long)declared, max_pixels);
  }
  /* libjpeg's own working memory: whole-image coefficients (progressive: 2 bytes per
   * coefficient, 3 components) plus its strip buffers; 8 bytes per pixel + 64 MiB covers it. */
  d.mem->max_memory_to_use = (long)(declared * 8 + (64L << 20));
  d.out_color_space = JCS_RGB; /* grayscale and YCbCr convert; CMYK raises an error */
  jpeg_start_decompress(&d);
  size_t w = d.output_width, h = d.output_height;
  rgb = loom_malloc(w * h * 3 + 1); /* sized by the file: an error, not an exit */
  if (!rgb) {
    jpeg_destroy_decompress(&d);
    return loom_err("%s: out of memory for a decoded %zux%zu image (%zu bytes)", where, w, h,
                    w * h * 3);
  }
  while (d.output_scanline < d.output_height) {
    JSAMPROW row = (JSAMPROW)(rgb + (size_t)d.output_scanline * w * 3);
    jpeg_read_scanlines(&d, &row, 1);
  }
  jpeg_finish_decompress(&d);
  jpeg_destroy_decompress(&d);
  out->w = (int)w;
  out->h = (int)h;
  out->rgb = rgb;
  return 0;
}

int loom_jpeg_encode(const loom_image *im, int quality, uint8_t **data, size_t *len) {
  struct jpeg_compress_struct c;
  err_mgr e;
  unsigned char *b = NULL; /* its address is taken: kept in memory across longjmp */
  unsigned long n = 0;
  c.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = on_error;
  e.pub.emit_message = on_message;
  if (setjmp(e.jump)) {
    jpeg_destroy_compress(&c);
    free(b);
    return loom_err("JPEG encode of a %dx%d image failed: %s", im->w, im->h, e.msg);
  }
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, &b, &n);
  c.image_width = (JDIMENSION)im->w;
  c.image_height = (JDIMENSION)im->h;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality < 1 ? 1 : quality > 100 ? 100 : quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = (JSAMPROW)(im->rgb + (size_t)c.next_scanline * (size_t)im->w * 3);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  *data = b;
  *len = n;
  return 0;
}

void loom_image_free(loom_image *im) {
  if (!im) return;
  free(im->rgb);
  im->rgb = NULL;
  im->w = im->h = 0;
}
