/* Text generation (`loom generate`): a trained decoder (GPT-2, Llama/Qwen2, or the text side
 * of a vision-language model) loaded whole into one process, an inference-only forward with
 * a KV cache (prefill a prompt once, then one token per step reusing the cached keys and
 * values), token sampling (greedy, temperature, top-k, top-p) and the generation loop over a
 * batch of prompts of different lengths (rows are ragged: each row keeps its own length and
 * positions, no padding, so a row's tokens are those of its prompt run alone).
 *
 * Shapes: C hidden, D head dim, Hq / Hkv query / key-value heads, I intermediate, V real
 * vocabulary, L layers, B batch rows, S max_seq (cache slots per row), M new tokens of one
 * forward call over all rows. */
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
  loom_decoder *d;       /* parameters (d->params, d->layout); its B=1, T=1 activations are
                            unused by generation (the vision encoder reads d) */
  char *dir;             /* the checkpoint directory given */
  bool from_hf;          /* dir is a Hugging Face directory (config.json, no config.yaml) */
  bool bf16;             /* run the matmuls on bf16 weights and inputs (fp32 accumulation,
                            everything else fp32), as training.dtype=bf16 does; set before
                            loom_gen_ctx_create. Needs native bf16 GEMMs (oneDNN) */
} loom_gen_model;

/* A loom checkpoint directory (config.yaml + model.safetensors, or multi-rank pieces) or a
 * Hugging Face directory (config.json + safetensors; converted through `loom ckpt import`'s
 * code into a temporary directory that is removed again). Errors name the path and the fix. */
int loom_gen_model_load(loom_gen_model *m, const char *dir);
void loom_gen_model_free(loom_gen_model *m);

/* ---- the KV cache (src/gen/kv_cache.c) --------------------------------------------------- */
typedef struct {
  int layers, batch, kv_heads, max_seq, head_dim; /* L, B, Hkv, S, D */
  float *k, *v;          /* (L, B, Hkv, S, D) each: slot s of row b holds the key/value of
                            that row's s-th token */
  int *len;              /* (B) slots filled per row */
} loom_kv_cache;
int loom_kv_cache_create(loom_kv_cache *c, const loom_model_spec *s, int batch, int max_seq);
void loom_kv_cache_free(loom_kv_cache *c);
/* pointer to K (or V) of (layer, row, kv head), slot 0: (S, D) */
float *loom_kv_cache_k(const loom_kv_cache *c, int layer, int row, int head);
float *loom_kv_cache_v(const loom_kv_cache *c, int layer, int row, int head);

/* ---- the inference forward (src/gen/forward.c) -------------------------------------------
 * One call appends count[i] new tokens to batch row row[i] of the cache for each of n_rows
 * rows, the tokens of all rows concatenated (M = sum count). Token j of row i sits in cache
 * slot len[row] + j; its rotary position is the slot + rope_delta[row] (text: delta 0), or
 * the three M-RoPE components from mrope (3, M) when given; GPT-2's learned position is the
 * slot. Rows where inject[m] >= 0 take embeds[inject[m]] (C) instead of the token embedding
 * (vision tokens). Logits (V real columns, row stride V) are written for the last new token
 * of each row (n_rows rows) or, with all_logits, for every new token (M rows). */
typedef struct {
  int n_rows;
  const int *row;            /* (n_rows) cache row of each row */
  const int *count;          /* (n_rows) new tokens, >= 1 */
  const int32_t *tokens;     /* (M) */
  const int32_t *mrope;      /* (3, M) or NULL */
  const int *rope_delta;     /* (B, indexed by cache row) or NULL (0) */
  const int *inject;         /* (M) or NULL */
  const float *embeds;       /* (n, C) */
  bool all_logits;
} loom_gen_batch;

typedef struct loom_gen_ctx loom_gen_ctx;
/* A cache of `batch` rows of max_seq slots (at most the model's max_seq) and the scratch of
 * the forward (grown to the largest call); bf16 copy of the weights when m->bf16. */
int loom_gen_ctx_create(loom_gen_ctx **g, const loom_gen_model *m, int batch, int max_seq);
void loom_gen_ctx_free(loom_gen_ctx *g);
loom_kv_cache *loom_gen_ctx_cache(loom_gen_ctx *g);
/* Runs the forward; logits as described above ((n_rows or M), V). */
int loom_gen_forward(loom_gen_ctx *g, const loom_gen_batch *b, float *logits);

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
