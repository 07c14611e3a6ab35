/* Packed documents through the whole decoder (GPT-2 with learned positions, Llama with rotary
 * positions and GQA), fp32, one process:
 *  - the loss of a packed micro-batch equals the token mean of each document's loss with the
 *    document run alone (its own decoder with T = its length, same weights), and the
 *    gradients equal the sum of the documents' gradients (all scaled by 1 / the packed token
 *    count). Tolerance 1e-5 relative (loss; gradients as a relative norm over the whole
 *    buffer): both sides compute the same sums in fp32 in other orders and GEMM shapes
 *    (~sqrt(rows) u = 1e-6); a document that saw another's keys or positions moves the loss
 *    by far more (checked: the same batch unpacked differs by more than 1e-3 relative —
 *    measured 3e-2 GPT-2, 6e-3 Llama — with init_std 0.2 so attention is not near-uniform);
 *  - end-of-document inputs have no target (as the loader writes them) and the last document
 *    of a row is cut by the window (no end-of-document token): both as a real run has them;
 *  - a window holding one document (no end-of-document token, or one only at its last
 *    position) gives bitwise the loss and gradients of the unpacked decoder;
 *  - activation checkpointing of a packed batch: bitwise the same loss and gradients. */
#include <math.h>

#include "harness.h"
#include "loom/decoder.h"
#include "loom/kernels.h"

#define EOD 3

/* tokens (B,T) of documents with the given lengths per row (0-terminated); a document ends
 * with EOD unless it is cut by the end of the row (cut[b] != 0 for the last one); targets are
 * random, ignored where the input is EOD */
static void make_batch(int32_t *tok, int32_t *tgt, int B, int T, const int lens[][8],
                       const int *cut, int V, uint64_t seed) {
  loom_rng r;
  loom_rng_seed(&r, seed);
  for (int b = 0; b < B; b++) {
    int t = 0;
    for (int i = 0; lens[b][i]; i++) {
      bool last = !lens[b][i + 1];
      for (int u = 0; u < lens[b][i]; u++, t++) {
        bool end = u == lens[b][i] - 1 && !(last && cut[b]);
        tok[b * T + t] = end ? EOD : 4 + (int32_t)loom_rng_below(&r, (uint64_t)V - 4);
        tgt[b * T + t] = end ? LOOM_IGNORE_INDEX : (int32_t)loom_rng_below(&r, (uint64_t)V);
      }
    }
    LOOM_ASSERT(t == T);
  }
}

static double rel_norm(const float *a, const double *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += b[i] * b[i];
  }
  return sqrt(num) / (den > 0 ? sqrt(den) : 1);
}

static void check_documents_alone(const char *preset) {
  loom_model_spec s;
  LOOM_ASSERT(loom_model_preset(&s, preset) == 0);
  s.init_std = 0.2; /* weights far from zero: attention and positions matter to the loss */
  enum { B = 2, T = 48 };
  const int lens[B][8] = {{10, 1, 20, 17}, {30, 18}}, cut[B] = {1, 0};
  int32_t tok[B * T], tgt[B * T];
  make_batch(tok, tgt, B, T, lens, cut, s.vocab_size, 21);
  loom_decoder *p;
  CHECK(loom_decoder_create(&p, &s, B, T, false, false) == 0, "%s", loom_errmsg());
  loom_decoder_init_params(p, 9);
  loom_decoder_set_doc_eod(p, EOD);
  double loss;
  int count;
  loom_decoder_zero_grads(p);
  loom_decoder_forward(p, tok, tgt, &loss, &count);
  loom_decoder_backward(p, 1.0f / count);

  size_t P = p->layout.total;
  double *grads = calloc(P, sizeof(double)), doc_loss = 0;
  int doc_count = 0, docs = 0;
  for (int b = 0; b < B; b++)
    for (int i = 0, s0 = 0; lens[b][i]; s0 += lens[b][i], i++, docs++) {
      loom_decoder *d;
      LOOM_ASSERT(loom_decoder_create(&d, &s, 1, lens[b][i], false, false) == 0);
      loom_decoder_init_params(d, 9);
      double l;
      int c;
      loom_decoder_zero_grads(d);
      loom_decoder_forward(d, tok + b * T + s0, tgt + b * T + s0, &l, &c);
      loom_decoder_backward(d, 1.0f / count); /* the packed batch's scale */
      LOOM_ASSERT(d->layout.total == P);
      for (size_t j = 0; j < P; j++) grads[j] += d->grads[j];
      doc_loss += l, doc_count += c;
      loom_decoder_free(d);
    }
  CHECK(count == doc_count, "%s: %d targets packed, %d over the documents", preset, count,
        doc_count);
  double rel = fabs(loss / count - doc_loss / doc_count) / (doc_loss / doc_count);
  double grel = rel_norm(p->grads, grads, P);
  printf("  %s: %d documents in %dx%d: loss %.8f vs documents alone %.8f (rel %.2e, tol 1e-5), "
         "gradients rel %.2e (tol 1e-5)\n", preset, docs, B, T, loss / count,
         doc_loss / doc_count, rel, grel);
  CHECK(rel <= 1e-5, "%s: packed loss %.9g vs token mean of documents %.9g", preset,
        loss / count, doc_loss / doc_count);
  CHECK(grel <= 1e-5, "%s: packed gradients differ from the documents' sum: %.3e", preset, grel);

  /* the same batch unpacked: the documents see each other, so the loss moves */
  loom_decoder_set_doc_eod(p, -1);
  double lu;
  int cu;
  loom_decoder_forward(p, tok, tgt, &lu, &cu);
  printf("  %s: the same batch unpacked: loss %.8f\n", preset, lu / cu);
  CHECK(fabs(lu / cu - loss / count) > 1e-3 * (loss / count),
        "%s: unpacked loss %.9g is within 1e-3 of the packed one %.9g: packing had no effect",
        preset, lu / cu, loss / count);
  free(grads);
  loom_decoder_free(p);
}

/* one document per window: bitwise the unpacked decoder */
static void check_one_document(const char *preset, bool eod_last) {
  loom_model_spec s;
  LOOM_ASSERT(loom_model_preset(&s, preset) == 0);
  enum { B = 2, T = 40 };
  const int lens[B][8] = {{T}, {T}}, cut[B] = {!eod_last, !eod_last};
  int32_t tok[B * T], tgt[B * T];
  make_batch(tok, tgt, B, T, lens, cut, s.vocab_size, 33);
  loom_decoder *a, *b;
  LOOM_ASSERT(loom_decoder_create(&a, &s, B, T, false, false) == 0);
  LOOM_ASSERT(loom_decoder_create(&b, &s, B, T, false, false) == 0);
  loom_decoder_init_params(a, 4);
  loom_decoder_init_params(b, 4);
  loom_decoder_set_doc_eod(b, EOD);
  double la, lb;
  int ca, cb;
  loom_decoder_zero_grads(a);
  loom_decoder_zero_grads(b);
  loom_decoder_forward(a, tok, tgt, &la, &ca);
  loom_decoder_forward(b, tok, tgt, &lb, &cb);
  loom_decoder_backward(a, 1.0f / ca);
  loom_decoder_backward(b, 1.0f / cb);
  CHECK(la == lb && ca == cb, "%s: one-document window: loss %.17g packed vs %.17g", preset, lb,
        la);
  CHECK(!memcmp(a->grads, b->grads, a->layout.total * sizeof(float)),
        "%s: one-document window: gradients not bitwise equal", preset);
  printf("  %s: one document per window%s: loss and gradients bitwise equal to unpacked\n",
         preset, eod_last ? " (ending at the window's end)" : " (cut by the window)");
  loom_decoder_free(a);
  loom_decoder_free(b);
}

/* activation checkpointing recomputes the packed blocks from the same segments: bitwise */
static void check_recompute(const char *preset) {
  loom_model_spec s;
  LOOM_ASSERT(loom_model_preset(&s, preset) == 0);
  enum { B = 2, T = 48 };
  const int lens[B][8] = {{5, 30, 13}, {1, 47}}, cut[B] = {0, 1};
  int32_t tok[B * T], tgt[B * T];
  make_batch(tok, tgt, B, T, lens, cut, s.vocab_size, 5);
  loom_decoder *a, *b;
  LOOM_ASSERT(loom_decoder_create(&a, &s, B, T, false, false) == 0);
  LOOM_ASSERT(loom_decoder_create(&b, &s, B, T, false, true) == 0);
  loom_decoder_init_params(a, 6);
  loom_decoder_init_params(b, 6);
  loom_decoder_set_doc_eod(a, EOD);
  loom_decoder_set_doc_eod(b, EOD);
  double la, lb;
  int ca, cb;
  loom_decoder_zero_grads(a);
  loom_decoder_zero_grads(b);
  loom_decoder_forward(a, tok, tgt, &la, &ca);
  loom_decoder_forward(b, tok, tgt, &lb, &cb);
  loom_decoder_backward(a, 1.0f / ca);
  loom_decoder_backward(b, 1.0f / cb);
  CHECK(la == lb && !memcmp(a->grads, b->grads, a->layout.total * sizeof(float)),
        "%s: packed with recompute differs (loss %.17g vs %.17g)", preset, lb, la);
  loom_decoder_free(a);
  loom_decoder_free(b);
}

int main(void) {
  const char *presets[] = {"tiny-gpt2", "tiny-llama"};
  for (int i = 0; i < 2; i++) {
    check_documents_alone(presets[i]);
    check_one_document(presets[i], false);
    check_one_document(presets[i], true);
    check_recompute(presets[i]);
  }
  return harness_finish("test_packed_decoder");
}
