/* Choosing the next token from a row of logits: greedy (argmax, the lowest id among equal
 * maxima), or a draw from softmax(logits / temperature) restricted to the top-k tokens and
 * then to the smallest prefix (most likely first, ties by id) whose probability reaches
 * top_p, renormalised. Probabilities are formed in double; one uniform draw per token. */
#include <math.h>
#include <stdlib.h>

#include "loom/generate.h"

typedef struct {
  double p;
  int32_t id;
} cand;

static int by_prob(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->p != y->p) return x->p > y->p ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static int32_t argmax(const float *l, int V) {
  int32_t best = 0;
  for (int v = 1; v < V; v++)
    if (l[v] > l[best]) best = v;
  return best;
}

int32_t loom_sample_token(const float *logits, int V, const loom_sampler *s, loom_rng *rng) {
  if (s->temperature <= 0 || s->top_k == 1) return argmax(logits, V);
  double mx = logits[argmax(logits, V)], inv_t = 1.0 / s->temperature;
  cand *c = loom_malloc((size_t)V * sizeof *c);
  for (int v = 0; v < V; v++) c[v] = (cand){exp(((double)logits[v] - mx) * inv_t), v};
  int n = V;
  bool restrict_set = (s->top_k > 0 && s->top_k < V) || s->top_p < 1.0;
  if (restrict_set) {
    qsort(c, (size_t)V, sizeof *c, by_prob);
    if (s->top_k > 0 && s->top_k < n) n = s->top_k;
    if (s->top_p < 1.0) {
      double total = 0, cum = 0;
      for (int i = 0; i < n; i++) total += c[i].p;
      int keep = n;
      for (int i = 0; i < n; i++) {
        cum += c[i].p;
        if (cum >= s->top_p * total) {
          keep = i + 1;
          break;
        }
      }
      n = keep;
    }
  }
  double total = 0;
  for (int i = 0; i < n; i++) total += c[i].p;
  double u = loom_rng_uniform(rng) * total, cum = 0;
  int32_t pick = c[n - 1].id;
  for (int i = 0; i < n; i++) {
    cum += c[i].p;
    if (u < cum) {
      pick = c[i].id;
      break;
    }
  }
  free(c);
  return pick;
}
