/* Text generation (`loom generate`): a trained decoder (GPT-2, Llama/Qwen2, or the text side
 * of a vision-language model) loaded whole into one process and run by its cached forward
 * (loom_decoder_forward_cached in decoder.h: the model's own layers with a KV cache; prefill
 * a prompt once, then one token per step reusing the cached keys and values), token sampling
 * (greedy, temperature, top-k, top-p) and the generation loop over a batch of prompts of
 * different lengths (rows are ragged: each row keeps its own length and positions, no
 * padding, so a row's tokens are those of its prompt run alone).
 *
 * Shapes: C hidden, V real vocabulary, B batch rows, S max_seq (cache slots per row). */
#ifndef LOOM_GENERATE_H
#define LOOM_GENERATE_H
#include <stdbool.h>
#include <stdint.h>

#include "loom/config.h"
#include "loom/core.h"
#include "loom/decoder.h"
#include "loom/model.h"
#include "loom/tokenizer.h"
#include "loom/vision.h"

/* ---- the model (src/gen/model_load.c) ---------------------------------------------------- */
typedef struct {
  loom_config cfg;       /* the checkpoint's config.yaml (model.*, data.tokenizer, images) */
  loom_model_spec spec;
  loom_decoder *d;       /* the model: parameters (d->params, d->layout) and the layers its
                            cached forward runs (its B=1, T=1 training activations are unused;
                            the vision encoder reads d) */
  char *dir;             /* the checkpoint directory given */
  bool from_hf;          /* dir is a Hugging Face directory (config.json, no config.yaml) */
  bool bf16;             /* run the matmuls on bf16 weights and inputs (fp32 accumulation,
                            everything else fp32) as training.dtype=bf16 does: native bf16
                            GEMMs where oneDNN has them, bf16-rounded fp32 weights elsewhere;
                            loom_generate sets d's precision to this (loom_decoder_set_bf16) */
} loom_gen_model;

/* A loom checkpoint directory (config.yaml + model.safetensors, or multi-rank pieces) or a
 * Hugging Face directory (config.json + safetensors; converted through `loom ckpt import`'s
 * code into a temporary directory that is removed again). Errors name the path and the fix. */
int loom_gen_model_load(loom_gen_model *m, const char *dir);
void loom_gen_model_free(loom_gen_model *m);

/* ---- sampling (src/gen/sample.c) --------------------------------------------------------- */
typedef struct {
  double temperature;   /* 0: greedy (argmax, lowest id on ties) */
  int top_k;            /* 0: off; keep the k most likely tokens */
  double top_p;         /* 1: off; keep the smallest most-likely set with mass >= top_p */
} loom_sampler;
/* Token id from logits (V): greedy when temperature == 0 (or top_k == 1), else softmax of
 * logits/temperature restricted by top-k then top-p (ties ordered by id), renormalised, drawn
 * with one loom_rng_uniform. */
int32_t loom_sample_token(const float *logits, int V, const loom_sampler *s, loom_rng *rng);

/* ---- the generation loop (src/gen/generate.c) -------------------------------------------- */
typedef struct {
  loom_sampler sampler;
  uint64_t seed;            /* row r draws from a generator seeded with seed + r */
  int max_new_tokens;
  const int32_t *stop_ids; /* tokens that end a row (not emitted), n_stop_ids of them */
  int n_stop_ids;
  const char *const *stop_strings; /* a row ends when its decoded text contains one (the text
                                      is cut before it) */
  int n_stop_strings;
  const loom_tokenizer *tok; /* for stop strings (may be NULL without them) */
  /* called with every new token of a row as it is produced (streaming); may be NULL */
  void (*on_token)(void *ctx, int row, int32_t id);
  void *on_token_ctx;
} loom_gen_options;

/* One prompt: token ids, and for a VLM prompt the vision tokens and M-RoPE positions. */
typedef struct {
  const int32_t *ids;     /* (n) */
  int n;
  const int32_t *mrope;   /* (3, n) or NULL */
  int rope_delta;         /* rotary position of generated token at slot s: s + rope_delta */
  const int *inject;      /* (n) row of embeds replacing the token's embedding, or -1; NULL */
  const float *embeds;    /* (tokens, C) */
} loom_gen_prompt;

typedef struct {
  int32_t *ids;           /* (n) generated ids (stop token excluded) */
  int n;
  int stop;               /* 0 max tokens, 1 stop token, 2 stop string, 3 max_seq reached */
  char *text;             /* decoded text (cut before a stop string); NULL without tokenizer */
} loom_gen_output;

typedef struct {
  double prefill_s, decode_s;  /* the prefill forward; everything after it (decode forwards
                                  and sampling) */
  long prefill_tokens;         /* prompt tokens of all rows */
  long decode_tokens;          /* tokens fed to decode forwards (one per running row a step) */
} loom_gen_stats;

/* Generate for n prompts as one batch. out (n) filled (free with loom_gen_output_free). */
int loom_generate(const loom_gen_model *m, const loom_gen_prompt *prompts, int n,
                  const loom_gen_options *o, loom_gen_output *out, loom_gen_stats *stats);
void loom_gen_output_free(loom_gen_output *o);

/* ---- vision-language prompts (src/gen/vlm_prompt.c) -------------------------------------- */
typedef struct {
  int32_t *ids;           /* (n) chat template up to and including "assistant\n" */
  int n;
  int32_t *mrope;         /* (3, n) (Qwen) or NULL (LLaVA-style: 1D positions) */
  int rope_delta;
  int *inject;            /* (n) vision token row or -1 */
  float *embeds;          /* (tokens, C) the vision encoder's output */
  int tokens;
} loom_vlm_prompt;
/* Image file + question -> the prompt the training data path builds for that sample (the
 * chat template of src/data/vqa_template.c, the image preprocessing of the VQA loader) with
 * the vision encoder run once. */
int loom_vlm_prompt_build(const loom_gen_model *m, loom_tokenizer *tok, const char *image_path,
                          const char *question, loom_vlm_prompt *p);
void loom_vlm_prompt_free(loom_vlm_prompt *p);
#endif
