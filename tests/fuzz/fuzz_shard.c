/* Fuzz harness: token shards (LOOMTOK1 header and token array) as `loom data inspect-shard`,
 * loom_shard_read and the training data loader read them. Invariants beyond memory safety:
 * every token an opened shard yields lies in [0, header vocab_size) (the header's promise, on
 * which the embedding lookup relies), max_token is the largest of them, and the loader's
 * windows hold only such tokens; packed documents (data.pack_documents) open only on a shard
 * recording an end-of-document token, ignore exactly the targets of its inputs, and give
 * every token of a window a segment holding it. */
#include "fuzz_util.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/loader.h"
#include "loom/shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file(data, size, ".bin");
  loom_shard_header h;
  int32_t *tok = NULL;
  if (loom_shard_read(path, &h, &tok)) return 0;
  int32_t max = -1;
  for (uint64_t i = 0; i < h.count; i++) {
    if (tok[i] < 0 || (uint32_t)tok[i] >= h.vocab_size)
      FUZZ_FINDING("token %d at index %llu is outside [0, vocab_size %u) of the header",
                   (int)tok[i], (unsigned long long)i, h.vocab_size);
    if (tok[i] > max) max = tok[i];
  }
  free(tok);
  loom_loader *l;
  if (loom_loader_open(&l, path, 1, 4, 0, 1, 7) == 0) {
    if (loom_loader_max_token(l) != max || loom_loader_vocab_size(l) != h.vocab_size)
      FUZZ_FINDING("loader max_token %d / vocab %u, shard max %d / vocab %u",
                   (int)loom_loader_max_token(l), loom_loader_vocab_size(l), (int)max, h.vocab_size);
    int32_t in[4], tg[4];
    for (int step = 0; step < 3; step++) {
      loom_loader_next(l, in, tg);
      for (int k = 0; k < 4; k++)
        if (in[k] < 0 || in[k] > max || tg[k] < 0 || tg[k] > max)
          FUZZ_FINDING("loader window holds token %d / %d outside [0, %d]", (int)in[k],
                       (int)tg[k], (int)max);
    }
    loom_loader_close(l);
  }
  /* packed documents: only a version-2 shard packs; a target is ignored exactly where its
   * input ends a document; the segments of a window cover it, each token inside its own */
  if (loom_loader_open(&l, path, 1, 4, 0, 1, 7) == 0) {
    int packs = loom_loader_pack_documents(l) == 0;
    if (packs != h.has_eod)
      FUZZ_FINDING("pack_documents %s a shard %s an end-of-document token",
                   packs ? "accepted" : "refused", h.has_eod ? "with" : "without");
    for (int step = 0; packs && step < 3; step++) {
      int32_t in[4], tg[4];
      int lo[4], hi[4], pos[4];
      loom_loader_next(l, in, tg);
      loom_attn_doc_segments(lo, hi, pos, in, 1, 4, h.eod_token);
      for (int k = 0; k < 4; k++) {
        if ((tg[k] == LOOM_IGNORE_INDEX) != (in[k] == h.eod_token) ||
            (tg[k] != LOOM_IGNORE_INDEX && (tg[k] < 0 || tg[k] > max)))
          FUZZ_FINDING("packed target %d of input %d (end of document %d)", (int)tg[k],
                       (int)in[k], (int)h.eod_token);
        if (!(lo[k] <= k && k <= hi[k] && pos[k] == k - lo[k] && hi[k] < 4 &&
              (k == 0 || lo[k] == (in[k - 1] == h.eod_token ? k : lo[k - 1]))))
          FUZZ_FINDING("segment [%d, %d] (position %d) of token %d", lo[k], hi[k], pos[k], k);
      }
    }
    loom_loader_close(l);
  }
  return 0;
}
