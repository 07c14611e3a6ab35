/* Context parallelism divides a rank's activation memory by cp: the decoder's planned arena
 * (saved activations of every layer plus the backward scratch, what the trainer allocates)
 * for one 16384-token sequence with cp = 1, 2, 4 (no communicator is needed to plan a shard).
 *
 * Every buffer of the arena is sized by the rank's B*T/cp tokens except the fused head's
 * vocabulary x hidden gradient (fixed), flash attention's backward scratch (B*Hq*T floats,
 * cp = 1 only) and the ring's scratch (K/V and dK/dV blocks: 8 B*T/cp*Hkv*D floats plus one
 * chunk pair, cp > 1 only), so the expected arena is
 *   arena(cp) = (arena(1) - fixed - flash) / cp + fixed + ring(cp)
 * up to the 64-byte rounding of each buffer (a few KB against tens of MB: 0.1%). The check
 * fails if any activation stays sized by the whole sequence. */
#include <math.h>

#include "harness.h"
#include "loom/decoder.h"
#include "loom/model.h"
#include "loom/ring_attention.h"
#include "model/decoder_internal.h"

static size_t arena(const loom_model_spec *s, int T, int cp, size_t *fixed) {
  loom_shard sh;
  loom_shard_full(&sh, s);
  sh.cp = cp, sh.cp_rank = cp - 1;
  loom_comm ring = {NULL, cp, cp - 1, "cp", 0, NULL};
  loom_decoder *d;
  LOOM_ASSERT(loom_decoder_create_shard(&d, s, &sh, 1, T, false, false, 1, NULL, NULL,
                                        cp > 1 ? &ring : NULL) == 0);
  size_t n = d->arena_bytes;
  *fixed = (size_t)d->vloc * s->hidden * sizeof(float); /* head_dw */
  loom_decoder_free(d);
  return n;
}

int main(void) {
  loom_model_spec s;
  CHECK(loom_model_preset(&s, "tiny-llama") == 0, "%s", loom_errmsg());
  s.vocab_size = s.padded_vocab = 301, s.layers = 2, s.hidden = 128, s.heads = 2;
  s.kv_heads = 1, s.head_dim = 64, s.intermediate = 256, s.max_seq = 16384;
  int T = 16384;
  size_t fixed, a1 = arena(&s, T, 1, &fixed);
  double flash = (double)s.heads * T * sizeof(float);
  for (int cp = 2; cp <= 4; cp *= 2) {
    size_t f, a = arena(&s, T, cp, &f);
    double ring = (double)loom_ring_attention_work_floats(1, T / cp, s.heads, s.kv_heads,
                                                          s.head_dim) * sizeof(float);
    double want = ((double)a1 - fixed - flash) / cp + (double)fixed + ring;
    CHECK(fabs((double)a - want) <= 1e-3 * want,
          "cp=%d: arena %.3f MB, expected (%.3f - %.3f - %.3f) / %d + %.3f + ring %.3f = %.3f MB",
          cp, a / 1e6, a1 / 1e6, fixed / 1e6, flash / 1e6, cp, fixed / 1e6, ring / 1e6,
          want / 1e6);
    printf("T=%d cp=%d: activation arena %.2f MB per rank (cp=1: %.2f MB; expected %.2f: head "
           "gradient %.2f MB fixed, ring scratch %.2f MB)\n", T, cp, a / 1e6, a1 / 1e6,
           want / 1e6, fixed / 1e6, ring / 1e6);
  }
  return harness_finish("cp_memory");
}
