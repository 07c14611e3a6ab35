/* Token sampling: greedy (temperature 0 or top-k 1) is the argmax with the lowest id among
 * equal maxima; a fixed seed reproduces the draws; and over 200000 draws on a 6-token
 * vocabulary the frequencies of temperature / top-k / top-p sampling match the probabilities
 * computed here independently (softmax of logits / T in double, the kept set by hand) within
 * 5 standard deviations of a binomial count (sqrt(p(1-p)/n) <= 0.0011: a false alarm has
 * probability ~6e-7 per check), and tokens outside the kept set are never drawn. */
#include "harness.h"
#include "loom/generate.h"

enum { V = 6, N = 200000 };
static const float L[V] = {2.0f, 1.0f, 0.5f, 0.5f, -1.0f, 0.0f};

/* expected probabilities: softmax(L / temp) over the ids in keep (others 0) */
static void expect(double temp, const int *keep, int nk, double *p) {
  double z = 0;
  for (int v = 0; v < V; v++) p[v] = 0;
  for (int i = 0; i < nk; i++) z += exp(L[keep[i]] / temp);
  for (int i = 0; i < nk; i++) p[keep[i]] = exp(L[keep[i]] / temp) / z;
}

static void check_freq(const char *what, loom_sampler s, const double *p) {
  loom_rng r;
  loom_rng_seed(&r, 1234);
  long count[V] = {0};
  for (int i = 0; i < N; i++) count[loom_sample_token(L, V, &s, &r)]++;
  for (int v = 0; v < V; v++) {
    double f = (double)count[v] / N, sd = sqrt(p[v] * (1 - p[v]) / N);
    if (p[v] == 0) CHECK(count[v] == 0, "%s: token %d drawn %ld times outside the set", what, v, count[v]);
    else CHECK(fabs(f - p[v]) <= 5 * sd, "%s: token %d frequency %.5f, expected %.5f (sd %.5f)", what, v, f, p[v], sd);
  }
}

int main(void) {
  loom_rng r;
  loom_rng_seed(&r, 1);
  loom_sampler greedy = {0, 0, 1}, k1 = {1.5, 1, 1};
  CHECK(loom_sample_token(L, V, &greedy, &r) == 0, "greedy is the argmax");
  for (int i = 0; i < 100; i++) CHECK(loom_sample_token(L, V, &k1, &r) == 0, "top-k 1 is greedy");
  const float tie[4] = {0.5f, 3.0f, 3.0f, 1.0f};
  CHECK(loom_sample_token(tie, 4, &greedy, &r) == 1, "greedy takes the lowest id of a tie");

  /* reproducible with a seed, different with another */
  loom_sampler t1 = {1.0, 0, 1};
  int32_t a[64], b[64], c[64];
  loom_rng ra, rb, rc;
  loom_rng_seed(&ra, 42), loom_rng_seed(&rb, 42), loom_rng_seed(&rc, 43);
  int same_ab = 1, same_ac = 1;
  for (int i = 0; i < 64; i++) {
    a[i] = loom_sample_token(L, V, &t1, &ra);
    b[i] = loom_sample_token(L, V, &t1, &rb);
    c[i] = loom_sample_token(L, V, &t1, &rc);
    same_ab &= a[i] == b[i];
    same_ac &= a[i] == c[i];
  }
  CHECK(same_ab, "the same seed gives the same draws");
  CHECK(!same_ac, "another seed gives other draws");

  double p[V];
  int all[V] = {0, 1, 2, 3, 4, 5};
  expect(1.0, all, V, p);
  check_freq("temperature 1", (loom_sampler){1.0, 0, 1}, p);
  expect(0.5, all, V, p);
  check_freq("temperature 0.5", (loom_sampler){0.5, 0, 1}, p);
  expect(2.0, all, V, p);
  check_freq("temperature 2", (loom_sampler){2.0, 0, 1}, p);
  /* top-k 3: tokens 0, 1 and the lower id of the 0.5 tie (2) */
  int k3[3] = {0, 1, 2};
  expect(1.0, k3, 3, p);
  check_freq("top-k 3 (tie broken by id)", (loom_sampler){1.0, 3, 1}, p);
  /* top-p: at T=1 the probabilities are 0.50018, 0.18401, 0.11161, 0.11161, 0.02490,
   * 0.06769: p=0.68 keeps {0, 1} (0.684 >= 0.68), p=0.45 keeps {0}, p=0.7 keeps {0, 1, 2}
   * (the tie at 0.11161 broken by id) */
  int p2[2] = {0, 1}, p3[3] = {0, 1, 2}, p1[1] = {0};
  expect(1.0, p2, 2, p);
  check_freq("top-p 0.68", (loom_sampler){1.0, 0, 0.68}, p);
  expect(1.0, p1, 1, p);
  check_freq("top-p 0.45", (loom_sampler){1.0, 0, 0.45}, p);
  expect(1.0, p3, 3, p);
  check_freq("top-p 0.7", (loom_sampler){1.0, 0, 0.7}, p);
  /* top-k then top-p at T=0.7: top-k 4 = {0,1,2,3}; mass of 0 then 1 within them */
  int k4[4] = {0, 1, 2, 3};
  expect(0.7, k4, 4, p);
  double p0 = p[0], p01 = p[0] + p[1];
  CHECK(p0 < 0.8 && p01 >= 0.8, "test setup: top-p 0.8 keeps tokens 0 and 1 (%.4f, %.4f)", p0, p01);
  expect(0.7, p2, 2, p);
  check_freq("top-k 4 + top-p 0.8 at temperature 0.7", (loom_sampler){0.7, 4, 0.8}, p);
  return harness_finish("test_gen_sample");
}
