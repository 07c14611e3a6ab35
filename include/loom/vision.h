/* The vision encoder of a vision-language model (Qwen2.5-VL ViT or LLaVA-style ViT, see
 * loom_vision_spec in model.h): forward from image patches to tokens in the text model's
 * hidden size, and backward into the vision.* gradients of the decoder's flat buffer.
 *
 * Input: the patches of a batch's images concatenated in image order, each image's patches in
 * the order its preprocessing produced (for Qwen: grid_t, then 2x2 merge blocks row-major,
 * patches inside a block row-major — so 4 consecutive patches form one merged token). */
#ifndef LOOM_VISION_H
#define LOOM_VISION_H
#include "loom/decoder.h"

typedef struct {
  int n_images;
  const int (*grid)[3];   /* (n_images) t, h, w in patches */
  const float *pixels;    /* (n_patches, loom_vision_patch_values) normalised pixel values */
  int n_patches;          /* sum of t*h*w */
} loom_vision_input;

typedef struct loom_vision loom_vision;

/* Plan buffers for up to max_patches patches per forward. */
int loom_vision_create(loom_vision **out, loom_decoder *d, int max_patches);
/* The encoder split over its own ranks, d being the vision module's parameter container
 * (shard module LOOM_MODULE_VISION): tensor parallel over tp_comm (d->shard.tp ranks: heads,
 * MLP and projector split Megatron-style) and sequence parallel over sp_comm (d->shard.sp
 * ranks: each holds 1/sp of the patches; every rank ends with all the tokens). Attention:
 * Ulysses (heads exchanged by all-to-all), or with ring = true context parallelism (sp_comm
 * is the cp ring; K/V blocks passed around it, loom_ring_seg_attention_*). */
int loom_vision_create_parallel(loom_vision **out, loom_decoder *d, int max_patches,
                                const loom_comm *tp_comm, const loom_comm *sp_comm, bool ring);
void loom_vision_free(loom_vision *v);
/* Bytes of activations and scratch planned (for the largest batch the encoder was created for). */
size_t loom_vision_arena_bytes(const loom_vision *v);
/* Tokens an image of (t, h, w) patches becomes: t*h*w / merge^2. */
int loom_vision_tokens(const loom_vision_spec *s, int t, int h, int w);
/* out (tokens, text hidden): the image tokens in image order. Errors for grids the encoder
 * cannot take (not multiples of merge, llava size mismatch, more patches than planned). */
int loom_vision_forward(loom_vision *v, const loom_vision_input *in, float *out);
/* dout (tokens, text hidden): gradient of the forward's output; accumulates into d->grads. */
void loom_vision_backward(loom_vision *v, const float *dout);
#endif
