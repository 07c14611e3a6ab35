/* The trainer's data: token shards (data.format: tokens) or vision-language samples
 * (data.format: vqa), sharded by data-parallel rank, giving each step's grad_accum
 * micro-batches as (A, B, T) tokens and targets — plus, for vqa, the micro-batches themselves
 * (images, grids, multimodal positions) for the vision encoder. */
#ifndef LOOM_DATA_SOURCE_H
#define LOOM_DATA_SOURCE_H
#include <stdint.h>

#include "loom/config.h"
#include "loom/loader.h"
#include "loom/model.h"

typedef struct loom_data_source loom_data_source;

int loom_data_open(loom_data_source **out, const loom_config *cfg, const loom_model_spec *spec,
                   int dp_rank, int dp);
/* Validation data, read as training reads (A micro-batches of B sequences per call, dealt
 * to data-parallel ranks): token data from data.val_shards or the held-out tail of
 * data.train_shards (data.val_fraction; training then reads only the head); vqa data from
 * data.val_shards or the val split of a prepared data.vqa_path directory. *out = NULL and 0
 * when there is none (an error when training.eval_every/eval_batches ask for evaluation). */
int loom_data_open_val(loom_data_source **out, const loom_config *cfg,
                       const loom_model_spec *spec, int dp_rank, int dp);
/* Whole calls of loom_data_next (A micro-batches each) in one epoch of the data. */
uint64_t loom_data_batches_per_epoch(const loom_data_source *s);
/* tokens, targets (A, B, T); vqa receives A pointers to this step's vqa batches (valid until
 * the next call), or is left alone for token data. */
int loom_data_next(loom_data_source *s, int32_t *tokens, int32_t *targets, const void **vqa);
void loom_data_get_state(const loom_data_source *s, loom_loader_state *st);
int loom_data_set_state(loom_data_source *s, const loom_loader_state *st);
/* "data/demo/train.bin, 744476 tokens" / "data/vqa (train), 900 samples" */
const char *loom_data_describe(const loom_data_source *s);
/* VQA data with data.skip_bad_samples: bad samples this rank's loader skipped since the start
 * of training (plus what loom_data_add_skipped restored), and the message of the latest ("" if
 * none). 0 for token data. */
uint64_t loom_data_skipped(const loom_data_source *s, const char **last);
void loom_data_add_skipped(loom_data_source *s, uint64_t n);
int loom_data_is_vqa(const loom_data_source *s);
/* data.pack_documents: the shards' end-of-document token (for loom_decoder_set_doc_eod), else
 * -1. */
int32_t loom_data_doc_eod(const loom_data_source *s);
void loom_data_close(loom_data_source *s);
#endif
