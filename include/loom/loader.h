/* loom data loader: batches of (inputs, targets) token windows from token shards, shuffled
 * per epoch and dealt to data-parallel ranks, with a resumable position.
 *
 * Semantics (every rank computes the same thing independently, no communication):
 *   - The shards (a file, a directory of *.bin files taken in name order, a glob pattern
 *     taken in sorted order, or the manifest of a shard set -- a .json file, or manifest.json
 *     of a directory, which then wins over its *.bin listing -- taken in the manifest's order,
 *     each shard checked against the tokens, vocabulary and end-of-document token it
 *     promises; include/loom/shard.h) are concatenated into one token stream of N tokens.
 *   - Windows are non-overlapping chunks of T+1 tokens starting at multiples of T: window w
 *     covers tokens [w*T, w*T+T] (its last token is the first of window w+1), so there are
 *     W = floor((N-1)/T) windows. Inputs are tokens [w*T, w*T+T), targets [w*T+1, w*T+T]
 *     (targets = inputs shifted by one). Windows may span shard boundaries.
 *   - Each epoch visits the windows in the order of a Fisher-Yates shuffle of 0..W-1:
 *       loom_rng_seed(&rng, seed ^ (0x9E3779B97F4A7C15 * (epoch + 1)));
 *       for i = W-1 down to 1: j = loom_rng_below(&rng, i+1); swap(order[i], order[j]);
 *   - The shuffled order is dealt to ranks: rank r takes positions r, r+world, r+2*world...;
 *     call k of an epoch returns the rank's windows k*B .. k*B+B-1 of that list, i.e.
 *     positions (k*B + b)*world + r for b = 0..B-1. One call on every rank together uses
 *     B*world consecutive positions, so an epoch has S = floor(W / (B*world)) calls; the last
 *     W mod (B*world) positions of each epoch are skipped (a different set each epoch).
 *   - After S calls the next epoch begins. The state is (epoch, index): index = calls
 *     already made in the epoch, in [0, S). Restoring a saved state reproduces exactly the
 *     batches that followed it.
 *   - Too few tokens for one call (W < B*world) is an error that gives the numbers.
 *   - Packed documents (loom_loader_pack_documents; data.pack_documents): the windows, their
 *     order and the inputs stay exactly as above (documents are cut where windows end, as
 *     Megatron-LM and torchtitan do: no token dropped, no padding); the shards record their
 *     end-of-document token EOD (shard version 2) and every target whose input is EOD
 *     becomes LOOM_IGNORE_INDEX: the last token of a document does not predict the first of
 *     the next (Megatron's eod_mask_loss, Hugging Face's DataCollatorWithFlattening). The
 *     decoder then splits attention and positions at each EOD (loom_decoder_set_doc_eod).
 * Memory: the shards are memory-mapped; the loader holds one W-entry order array. */
#ifndef LOOM_LOADER_H
#define LOOM_LOADER_H
#include <stdbool.h>
#include <stdint.h>

typedef struct loom_loader loom_loader;
typedef struct {
  uint64_t epoch; /* epochs completed */
  uint64_t index; /* calls made in the current epoch, < batches per epoch */
} loom_loader_state;

/* shards: a file, a directory of *.bin, a glob or a manifest. B windows of T tokens per call;
 * this is rank `rank` of `world`; seed fixes the shuffles. Starts at state (0, 0). */
int loom_loader_open(loom_loader **out, const char *shards, int B, int T, int rank, int world,
                     uint64_t seed);
/* A part of the stream: the N tokens split into a head of N - floor(N * held_out) tokens
 * (validation false: what training reads) and the held-out tail of floor(N * held_out)
 * tokens (validation true); each part is then a stream of its own with the semantics above
 * (windows never cross from one part into the other, so the two are disjoint). held_out in
 * (0, 1). */
int loom_loader_open_part(loom_loader **out, const char *shards, int B, int T, int rank,
                          int world, uint64_t seed, double held_out, bool validation);
/* Turn on packed documents: every shard must record the same end-of-document token (else an
 * error naming the shard and saying how to re-tokenize). */
int loom_loader_pack_documents(loom_loader *l);
/* The end-of-document token while packing documents, else -1. */
int32_t loom_loader_doc_eod(const loom_loader *l);
/* Fill inputs and targets, both (B, T) row-major int32; advances the state. */
int loom_loader_next(loom_loader *l, int32_t *inputs, int32_t *targets);
void loom_loader_get_state(const loom_loader *l, loom_loader_state *s);
/* Error (state unchanged) when index >= batches per epoch. */
int loom_loader_set_state(loom_loader *l, const loom_loader_state *s);
uint64_t loom_loader_total_tokens(const loom_loader *l);  /* N */
uint64_t loom_loader_num_windows(const loom_loader *l);   /* W */
uint64_t loom_loader_batches_per_epoch(const loom_loader *l); /* S */
uint32_t loom_loader_vocab_size(const loom_loader *l);    /* max of the shard headers */
int32_t loom_loader_max_token(const loom_loader *l);      /* largest token id present */
void loom_loader_close(loom_loader *l);

#endif
