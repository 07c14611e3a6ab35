/* Helper of tests/data/vqa_check.py (not a test by itself): writes what loom computes so
 * Python can recompute it independently.
 *   vqa_dump OUT SYNTH_DIR
 * OUT/manifest.json lists raw little-endian arrays (name -> file, dtype, shape):
 *   image cases: the original RGB (h, w, 3) u8, loom's decoded JPEG of it, loom's resized
 *     RGB (rh, rw, 3) u8 and patches (n, 1176) f32 for sizes that upscale, downscale and
 *     keep the size;
 *   a loader batch over LLaVA annotations (1 or 2 images of different sizes per sample):
 *     input_ids, attention_mask, targets (B, T) i32, position_ids (3, B, T) i32,
 *     rope_deltas (B), grid_thw (n, 3), image_row (n), pixel_values (P, 1176) f32, and the
 *     special token ids; the same annotations as LLaVA-style batches (llava_*: 112 px images,
 *     pixel_values (P, 588), 1D position ids). SYNTH_DIR/tokenizer.json (from synth-vqa) is
 *     the tokenizer. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/image.h"
#include "loom/vqa.h"

static const char *out_dir;
static json_t *manifest;

static void dump(const char *name, const void *data, size_t bytes, const char *dtype, int nd,
                 const long *shape) {
  char *path = loom_sprintf("%s/%s.bin", out_dir, name);
  if (loom_write_file_atomic(path, data, bytes)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    exit(2);
  }
  json_t *sh = json_array();
  for (int i = 0; i < nd; i++) json_array_append_new(sh, json_integer(shape[i]));
  json_object_set_new(manifest, name, json_pack("{s:s, s:s, s:o}", "file", path, "dtype", dtype,
                                                "shape", sh));
  free(path);
}

static void make_image(loom_image *im, int w, int h, uint64_t seed) {
  loom_rng rng;
  loom_rng_seed(&rng, seed);
  im->w = w;
  im->h = h;
  im->rgb = malloc((size_t)w * h * 3);
  for (int y = 0; y < h; y++) /* smooth gradients + texture + noise: exercises the filter */
    for (int x = 0; x < w; x++)
      for (int c = 0; c < 3; c++) {
        int v = (x * 255 / w + y * 97 / h + c * 60 + ((x / 5 + y / 3) % 2) * 40 +
                 (int)loom_rng_below(&rng, 30)) % 256;
        im->rgb[((size_t)y * w + x) * 3 + c] = (uint8_t)v;
      }
}

static void image_case(const char *tag, int w, int h, long minp, long maxp) {
  loom_image im, dec, rs;
  make_image(&im, w, h, (uint64_t)(w * 1000 + h));
  uint8_t *jpg;
  size_t jl;
  if (loom_jpeg_encode(&im, 92, &jpg, &jl) || loom_jpeg_decode(jpg, jl, tag, &dec)) exit(2);
  char name[64], *jp = loom_sprintf("%s/%s.jpg", out_dir, tag);
  loom_write_file_atomic(jp, jpg, jl);
  free(jp);
  int rh, rw;
  if (loom_smart_resize(h, w, minp, maxp, tag, &rh, &rw)) exit(2);
  if (rh == h && rw == w) {
    rs.w = w, rs.h = h, rs.rgb = malloc((size_t)w * h * 3);
    memcpy(rs.rgb, dec.rgb, (size_t)w * h * 3);
  } else if (loom_image_resize_bicubic(&dec, rw, rh, &rs)) {
    exit(2);
  }
  loom_vision_grid g = loom_vision_grid_of(rh, rw);
  float *p = malloc((size_t)g.patches * LOOM_IMG_PATCH_DIM * sizeof(float));
  loom_image_patchify(&rs, p);
  long s1[3] = {h, w, 3}, s2[3] = {rh, rw, 3}, s3[2] = {g.patches, LOOM_IMG_PATCH_DIM};
  snprintf(name, sizeof name, "%s_decoded", tag);
  dump(name, dec.rgb, (size_t)w * h * 3, "u8", 3, s1);
  snprintf(name, sizeof name, "%s_resized", tag);
  dump(name, rs.rgb, (size_t)rw * rh * 3, "u8", 3, s2);
  snprintf(name, sizeof name, "%s_patches", tag);
  dump(name, p, (size_t)g.patches * LOOM_IMG_PATCH_DIM * 4, "f32", 2, s3);
  json_object_set_new(manifest, tag, json_pack("{s:i, s:i, s:I, s:I, s:i, s:i}", "w", w, "h", h,
                                               "min_pixels", (json_int_t)minp, "max_pixels",
                                               (json_int_t)maxp, "rw", rw, "rh", rh));
  free(p);
  free(jpg);
  loom_image_free(&im);
  loom_image_free(&dec);
  loom_image_free(&rs);
}

static void write_jpeg(const char *name, int w, int h) {
  loom_image im;
  make_image(&im, w, h, (uint64_t)(w + 7 * h));
  uint8_t *jpg;
  size_t jl;
  if (loom_jpeg_encode(&im, 90, &jpg, &jl)) exit(2);
  char *p = loom_sprintf("%s/img/%s", out_dir, name);
  loom_write_file_atomic(p, jpg, jl);
  free(p);
  free(jpg);
  loom_image_free(&im);
}

static void batch_case(const char *synth_dir) {
  char *img = loom_sprintf("%s/img", out_dir);
  loom_mkdir_p(img);
  free(img);
  write_jpeg("a.jpg", 112, 56);
  write_jpeg("b.jpg", 56, 84);
  write_jpeg("c.jpg", 30, 40);
  const char *anno =
      "[{\"id\": \"two\", \"image\": [\"img/a.jpg\", \"img/b.jpg\"], \"conversations\": ["
      "{\"from\": \"human\", \"value\": \"Compare <image> with\\n<image> please.\"},"
      "{\"from\": \"gpt\", \"value\": \"The first is wider.\"}]},"
      "{\"id\": \"one\", \"image\": \"img/c.jpg\", \"conversations\": ["
      "{\"from\": \"human\", \"value\": \"<image>\\nWhat is it?\"},"
      "{\"from\": \"gpt\", \"value\": \"stripes\"},"
      "{\"from\": \"human\", \"value\": \"And the colour?\"},"
      "{\"from\": \"gpt\", \"value\": \"mixed\"}]},"
      "{\"id\": \"text\", \"conversations\": ["
      "{\"from\": \"human\", \"value\": \"Say hi.\"}, {\"from\": \"gpt\", \"value\": \"hi\"}]}]";
  char *ap = loom_sprintf("%s/anno.json", out_dir), *tp = loom_sprintf("%s/tokenizer.json",
                                                                       synth_dir);
  loom_write_file_atomic(ap, anno, strlen(anno));
  loom_tokenizer *tok;
  loom_vqa_loader *l;
  if (loom_tokenizer_load(&tok, tp)) exit(2);
  loom_vqa_options o = {ap, "train", tok, 160, 3, 0, 0, 0, 1, 5, false, 0};
  loom_vqa_batch b;
  if (loom_vqa_loader_open(&l, &o) || loom_vqa_loader_next(l, &b)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    exit(2);
  }
  long bt[2] = {b.B, b.T}, pbt[3] = {3, b.B, b.T}, nb[1] = {b.B}, g[2] = {b.n_images, 3},
       ni[1] = {b.n_images}, px[2] = {(long)b.total_patches, LOOM_IMG_PATCH_DIM};
  size_t BT = (size_t)b.B * b.T;
  dump("input_ids", b.input_ids, BT * 4, "i32", 2, bt);
  dump("attention_mask", b.attention_mask, BT * 4, "i32", 2, bt);
  dump("targets", b.targets, BT * 4, "i32", 2, bt);
  dump("position_ids", b.position_ids, 3 * BT * 4, "i32", 3, pbt);
  dump("rope_deltas", b.rope_deltas, (size_t)b.B * 4, "i32", 1, nb);
  dump("grid_thw", b.grid_thw, (size_t)b.n_images * 12, "i32", 2, g);
  dump("image_row", b.image_row, (size_t)b.n_images * 4, "i32", 1, ni);
  dump("pixel_values", b.pixel_values, (size_t)b.total_patches * LOOM_IMG_PATCH_DIM * 4, "f32",
       2, px);
  loom_vqa_special sp;
  loom_vqa_special_ids(tok, &sp);
  json_t *keys = json_array();
  for (int i = 0; i < b.B; i++) json_array_append_new(keys, json_string(b.keys[i]));
  json_object_set_new(manifest, "batch",
                      json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:o}", "pad", sp.pad,
                                "im_start", sp.im_start, "im_end", sp.im_end, "vision_start",
                                sp.vision_start, "image_pad", sp.image_pad, "vision_end",
                                sp.vision_end, "tokenizer", tp, "keys", keys));
  loom_vqa_loader_close(l);
  /* the same annotations as LLaVA-style batches: 112 px fixed images, one frame, no merge */
  loom_vqa_options ol = {ap, "train", tok, 320, 3, 0, 0, 0, 1, 5, false, 112};
  if (loom_vqa_loader_open(&l, &ol) || loom_vqa_loader_next(l, &b)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    exit(2);
  }
  long bt2[2] = {b.B, b.T}, pbt2[3] = {3, b.B, b.T}, g2[2] = {b.n_images, 3},
       ni2[1] = {b.n_images}, px2[2] = {(long)b.total_patches, LOOM_IMG_PATCH_DIM_FIXED};
  BT = (size_t)b.B * b.T;
  dump("llava_input_ids", b.input_ids, BT * 4, "i32", 2, bt2);
  dump("llava_attention_mask", b.attention_mask, BT * 4, "i32", 2, bt2);
  dump("llava_position_ids", b.position_ids, 3 * BT * 4, "i32", 3, pbt2);
  dump("llava_grid_thw", b.grid_thw, (size_t)b.n_images * 12, "i32", 2, g2);
  dump("llava_image_row", b.image_row, (size_t)b.n_images * 4, "i32", 1, ni2);
  dump("llava_pixel_values", b.pixel_values,
       (size_t)b.total_patches * LOOM_IMG_PATCH_DIM_FIXED * 4, "f32", 2, px2);
  json_t *lkeys = json_array();
  for (int i = 0; i < b.B; i++) json_array_append_new(lkeys, json_string(b.keys[i]));
  json_object_set_new(manifest, "llava_keys", lkeys);
  loom_vqa_loader_close(l);
  loom_tokenizer_free(tok);
  free(ap);
  free(tp);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: vqa_dump OUT SYNTH_DIR\n");
    return 2;
  }
  out_dir = argv[1];
  loom_mkdir_p(out_dir);
  manifest = json_object();
  image_case("up", 75, 50, 3136, 1003520);        /* below min_pixels: upscaled */
  image_case("down", 300, 190, 3136, 28 * 28 * 16); /* above max_pixels: downscaled */
  image_case("same", 84, 56, 3136, 1003520);      /* already multiples of 28 */
  image_case("round", 100, 131, 3136, 1003520);   /* rounded to 112 x 140 */
  batch_case(argv[2]);
  char *path = loom_sprintf("%s/manifest.json", out_dir);
  json_dump_file(manifest, path, JSON_INDENT(1));
  free(path);
  json_decref(manifest);
  return 0;
}
