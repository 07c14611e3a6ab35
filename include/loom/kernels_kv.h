/* Attention of new tokens over a KV cache: the kernel of the decoder's cached forward
 * (generation, src/model/decoder_cached.c). Each new token's query attends to the cached
 * keys and values of its own sequence up to and including its own slot (causal), one query
 * row at a time: a decode step has one query per sequence and hundreds of cached keys, where
 * the tiled flash attention of training has nothing to tile.
 *
 * Shapes: M new tokens, Hq query heads, Hkv key/value heads (grouped-query: query head h
 * reads kv head h / (Hq/Hkv)), D head dim, S cache slots per sequence, R cached sequences. */
#ifndef LOOM_KERNELS_KV_H
#define LOOM_KERNELS_KV_H
#include <stddef.h>

/* Scratch floats the calls below need (per thread: S scores and one bf16-rounded query). */
size_t loom_attention_kv_work_floats(int S, int D);
/* out (M, Hq, D) = softmax(q K^T / sqrt(D)) V per token and head, q (M, Hq, D); k, v (R, Hkv,
 * S, D) one layer of the cache; token m attends to slots [0, n[m]) of sequence row[m].
 * Scores one key at a time, a two-pass softmax, the weighted sum of values (AVX-512 where the
 * CPU has it and D <= 256, else portable C). work: loom_attention_kv_work_floats. */
void loom_attention_kv_forward_f32(float *out, const float *q, const float *k, const float *v,
                                   int M, int Hq, int Hkv, int S, int D, const int *row,
                                   const int *n, float *work);
/* The same as training's bf16 flash attention computes it: q rounded to bf16 here, k and v
 * must hold bf16 values already (the cache stores them rounded), exp(s - max) rounded to bf16
 * before it weights v and the sum normalised after; scores, softmax statistics and the sums
 * in fp32. */
void loom_attention_kv_forward_bf16(float *out, const float *q, const float *k, const float *v,
                                    int M, int Hq, int Hkv, int S, int D, const int *row,
                                    const int *n, float *work);
#endif
