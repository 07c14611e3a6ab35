/* loom image pipeline for vision-language data, exactly as Qwen2-VL / Qwen2.5-VL's (slow,
 * PIL-based) image processor prepares a still image:
 *
 *   JPEG bytes --decode (libjpeg-turbo)--> RGB uint8 (H, W, 3)
 *     --smart_resize--> target (h, w), multiples of 28 with min_pixels <= h*w <= max_pixels
 *     --bicubic resize (PIL's algorithm, bit-exact: a = -0.5, antialiased, 22-bit fixed
 *       point, horizontal pass then vertical, uint8 after each pass)--> RGB uint8 (h, w, 3)
 *     --x/255, (x - CLIP mean) / CLIP std--> float
 *     --patchify--> (grid_t*grid_h*grid_w, 3*2*14*14 = 1176) float rows
 *
 * Patch order (Qwen's reshape(t, 2, 3, gh/2, 2, 14, gw/2, 2, 14).permute(0,3,6,4,7,2,1,5,8)):
 *   row    = ((t*(gh/2) + bh)*(gw/2) + bw)*4 + mh*2 + mw     (grid_t = 1 for an image)
 *   column = ((c*2 + tt)*14 + py)*14 + px                     (tt: the image twice)
 * covering pixel row (bh*2+mh)*14+py, column (bw*2+mw)*14+px, channel c. The 4 patches of a
 * 2x2 merge block are contiguous rows, so the patch merger's "concatenate 4 neighbours" is a
 * reshape of (n, 1176-derived hidden) to (n/4, 4*hidden).
 *
 * Sizes: an image is refused (an error naming it) when a side is below 28 px (the minimum
 * loom accepts; Qwen itself would upscale anything >= 10 px) or when its aspect ratio
 * exceeds 200 (Qwen's rule). Otherwise smart_resize upscales small images to min_pixels and
 * downscales large ones to max_pixels. */
#ifndef LOOM_IMAGE_H
#define LOOM_IMAGE_H
#include <stddef.h>
#include <stdint.h>

#define LOOM_IMG_PATCH 14          /* patch_size */
#define LOOM_IMG_TEMPORAL 2        /* temporal_patch_size (a still image is repeated) */
#define LOOM_IMG_MERGE 2           /* spatial merge_size: 2x2 patches -> 1 token */
#define LOOM_IMG_FACTOR 28         /* patch_size * merge_size */
#define LOOM_IMG_PATCH_DIM 1176    /* 3 * 2 * 14 * 14 values per patch */
#define LOOM_IMG_PATCH_DIM_FIXED 588 /* 3 * 14 * 14: one frame (LLaVA-style fixed-size images) */
#define LOOM_IMG_MIN_SIDE 28       /* smaller sides are refused */
#define LOOM_IMG_MAX_RATIO 200.0   /* max(h,w)/min(h,w) above this is refused */
#define LOOM_IMG_MIN_PIXELS_DEFAULT 3136L     /* 56*56 */
#define LOOM_IMG_MAX_PIXELS_DEFAULT 1003520L  /* 28*28*1280 */
/* Most pixels a JPEG may declare in its header (checked before anything is allocated):
 * 2^26 = 67,108,864 (8192 x 8192; 192 MiB as RGB). The image pipelines allow more when the
 * configured resize target (data.image_max_pixels, or the fixed size squared) is larger. */
#define LOOM_IMG_MAX_DECODE_PIXELS (1L << 26)

/* OpenAI CLIP normalisation (Qwen's image_mean / image_std). */
extern const float loom_clip_mean[3], loom_clip_std[3];

/* An RGB image, row-major (h, w, 3) uint8. */
typedef struct {
  int w, h;
  uint8_t *rgb; /* malloc'd, h*w*3 */
} loom_image;
void loom_image_free(loom_image *im);

/* ---- JPEG (libjpeg-turbo) ------------------------------------------------------------------
 * Decode any baseline/progressive JPEG (grayscale is expanded to RGB). Corrupt or truncated
 * data (libjpeg errors AND warnings such as "Premature end of JPEG file") is an error: libjpeg
 * never exits or prints. `where` names the data in messages ("shard 000001.tar, sample 42");
 * the message says what was wrong and what to do. */
int loom_jpeg_decode(const uint8_t *data, size_t len, const char *where, loom_image *out);
/* (a header declaring more than LOOM_IMG_MAX_DECODE_PIXELS pixels is refused, see below) */
/* loom_jpeg_decode with a pixel limit of max_pixels (LOOM_IMG_MAX_DECODE_PIXELS above):
 * a header declaring more is an error naming `where`, the declared size and the limit,
 * returned before libjpeg or loom allocates image-sized buffers. */
int loom_jpeg_decode_limit(const uint8_t *data, size_t len, const char *where, long max_pixels,
                           loom_image *out);
/* Image size from the JPEG header alone (no decode). */
int loom_jpeg_size(const uint8_t *data, size_t len, const char *where, int *w, int *h);
/* Encode RGB (h, w, 3) at quality 1..100 (4:2:0); *data malloc'd, *len bytes. */
int loom_jpeg_encode(const loom_image *im, int quality, uint8_t **data, size_t *len);

/* ---- sizes -------------------------------------------------------------------------------- */
/* Qwen's smart_resize(height, width, factor=28, min_pixels, max_pixels): round each side to
 * the nearest multiple of 28 (Python round: ties to even); if the area exceeds max_pixels,
 * scale by beta = sqrt(h*w/max) and floor to multiples of 28 (at least 28); if it is below
 * min_pixels, scale by sqrt(min/(h*w)) and ceil. Errors (naming `where`): a side < 28 px,
 * aspect ratio > 200, min_pixels > max_pixels or max_pixels < 28*28. */
int loom_smart_resize(int h, int w, long min_pixels, long max_pixels, const char *where,
                      int *out_h, int *out_w);

/* Vision-token arithmetic for a resized (h, w) (multiples of 28): grid (t=1, h/14, w/14)
 * patches, patches = h*w/196, merged tokens = patches/4. 448x448 -> 1024 -> 256. */
typedef struct {
  int grid_t, grid_h, grid_w; /* in patches */
  long patches;               /* grid_t * grid_h * grid_w: rows fed to the vision encoder */
  long tokens;                /* patches / 4: merged tokens placed in the text sequence */
} loom_vision_grid;
loom_vision_grid loom_vision_grid_of(int resized_h, int resized_w);
/* smart_resize then loom_vision_grid_of, for an original image size. */
int loom_vision_tokens_for(int h, int w, long min_pixels, long max_pixels, const char *where,
                           loom_vision_grid *g);

/* ---- resize, normalise, patchify ---------------------------------------------------------- */
/* PIL Image.resize(..., BICUBIC) bit for bit (see the top of this file). out allocated. */
int loom_image_resize_bicubic(const loom_image *in, int out_w, int out_h, loom_image *out);
/* Normalise and patchify a (h, w) image whose sides are multiples of 28 into
 * patches (g.patches, 1176) float32 row-major (caller-allocated). */
void loom_image_patchify(const loom_image *im, float *patches);
/* The whole pipeline: decode, check, smart_resize, resize, patchify. *patches malloc'd
 * (g->patches, 1176); *g the grid; orig_w/orig_h may be NULL. */
int loom_image_prepare(const uint8_t *jpeg, size_t len, long min_pixels, long max_pixels,
                       const char *where, float **patches, loom_vision_grid *g, int *orig_w,
                       int *orig_h);
/* The LLaVA-style pipeline: decode, resize (bicubic) to size x size (a multiple of 14),
 * normalise (CLIP), patchify row-major into (g->patches, 588) values (channel, row, column
 * of one frame); grid (1, size/14, size/14), one token per patch (no merge). */
int loom_image_prepare_fixed(const uint8_t *jpeg, size_t len, int size, const char *where,
                             float **patches, loom_vision_grid *g, int *orig_w, int *orig_h);

#endif
