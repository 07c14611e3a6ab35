/* Data loader: windows are contiguous T+1 token chunks at multiples of T (also across shard
 * boundaries) with targets = inputs shifted by one; directory / glob / file specs; the
 * documented Fisher-Yates order; determinism; rank sharding (the ranks together see every
 * window of an epoch exactly once); epochs; save/restore of the state; errors. Token value
 * == global position, so every batch can be checked against the spec. */
#include "data_test_util.h"
#include "loom/loader.h"
#include "loom/shard.h"

#define DIR "data-loader.tmp"

/* Shards of sizes[] tokens holding global positions 0..N-1 (vocab 65536). */
static uint64_t make_shards(const char *sub, const uint64_t *sizes, int n, uint32_t vocab_last) {
  char *d = scratch_path(DIR, sub);
  loom_mkdir_p(d);
  uint64_t pos = 0;
  for (int s = 0; s < n; s++) {
    int32_t *tok = malloc((sizes[s] + 1) * sizeof *tok);
    for (uint64_t i = 0; i < sizes[s]; i++) tok[i] = (int32_t)(pos + i);
    char *p = loom_sprintf("%s/part_%02d.bin", d, s);
    CHECK(loom_shard_write(p, tok, sizes[s], s == n - 1 ? vocab_last : 65536) == 0, "write shard");
    pos += sizes[s];
    free(p);
    free(tok);
  }
  free(d);
  return pos;
}

static loom_loader *open_ok(const char *spec, int B, int T, int rank, int world, uint64_t seed) {
  loom_loader *l = NULL;
  CHECK(loom_loader_open(&l, spec, B, T, rank, world, seed) == 0, "open %s: %s", spec, loom_errmsg());
  return l;
}

/* Next batch; checks the window shape; writes the window indices to win[B]. */
static void next_checked(loom_loader *l, int B, int T, uint64_t *win) {
  int32_t *x = malloc(sizeof(int32_t) * (size_t)(B * T)), *y = malloc(sizeof(int32_t) * (size_t)(B * T));
  loom_loader_next(l, x, y);
  int bad = 0;
  for (int b = 0; b < B; b++) {
    bad += x[b * T] % T != 0;
    for (int t = 0; t < T; t++) {
      bad += y[b * T + t] != x[b * T + t] + 1;
      bad += x[b * T + t] != x[b * T] + t;
    }
    win[b] = (uint64_t)x[b * T] / (uint64_t)T;
  }
  CHECK(bad == 0, "%d violations of window shape / targets = inputs + 1", bad);
  free(x);
  free(y);
}

/* The documented order of an epoch. */
static void reference_order(uint64_t W, uint64_t seed, uint64_t epoch, uint64_t *order) {
  for (uint64_t i = 0; i < W; i++) order[i] = i;
  loom_rng r;
  loom_rng_seed(&r, seed ^ (0x9E3779B97F4A7C15ull * (epoch + 1)));
  for (uint64_t i = W - 1; i > 0; i--) {
    uint64_t j = loom_rng_below(&r, i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

static void test_basics(void) {
  uint64_t sizes[] = {100, 0, 37, 250, 14}; /* 401 tokens: T = 16 -> 25 windows */
  uint64_t n = make_shards("basic", sizes, 5, 70000);
  char *dir = scratch_path(DIR, "basic"), *glob = loom_sprintf("%s/part_0*.bin", dir);
  char *one = loom_sprintf("%s/part_00.bin", dir);
  loom_loader *l = open_ok(dir, 2, 16, 0, 1, 5);
  if (!l) return;
  CHECK(loom_loader_total_tokens(l) == n && n == 401, "total %llu", (unsigned long long)n);
  CHECK(loom_loader_num_windows(l) == 25 && loom_loader_batches_per_epoch(l) == 12, "W, S");
  CHECK(loom_loader_vocab_size(l) == 70000, "vocab = max of headers");
  CHECK(loom_loader_max_token(l) == 400, "max token %d", loom_loader_max_token(l));
  uint64_t order[25], win[2];
  reference_order(25, 5, 0, order);
  int same = 1;
  for (int k = 0; k < 12; k++) {
    next_checked(l, 2, 16, win);
    same &= win[0] == order[2 * k] && win[1] == order[2 * k + 1];
  }
  CHECK(same, "epoch 0 follows the documented Fisher-Yates order");
  loom_loader_state st;
  loom_loader_get_state(l, &st);
  CHECK(st.epoch == 1 && st.index == 0, "after S calls: epoch 1 index 0");
  reference_order(25, 5, 1, order);
  next_checked(l, 2, 16, win);
  CHECK(win[0] == order[0] && win[1] == order[1], "epoch 1 reshuffles with (seed, 1)");
  loom_loader_close(l);
  l = open_ok(glob, 2, 16, 0, 1, 5);
  CHECK(l && loom_loader_total_tokens(l) == 401, "glob spec");
  loom_loader_close(l);
  l = open_ok(one, 2, 16, 0, 1, 5);
  CHECK(l && loom_loader_total_tokens(l) == 100, "single file spec");
  loom_loader_close(l);
  free(dir), free(glob), free(one);
}

static void test_ranks(int world, int B, int T, uint64_t W) {
  uint64_t sizes[] = {W * (uint64_t)T / 3, W * (uint64_t)T - W * (uint64_t)T / 3 + 1};
  make_shards("ranks", sizes, 2, 65536);
  char *dir = scratch_path(DIR, "ranks");
  uint64_t S = W / (uint64_t)(B * world);
  int *seen = calloc(W, sizeof *seen);
  uint64_t *win = malloc((size_t)B * sizeof *win);
  for (int r = 0; r < world; r++) {
    loom_loader *l = open_ok(dir, B, T, r, world, 42);
    if (!l) break;
    CHECK(loom_loader_batches_per_epoch(l) == S, "S");
    for (uint64_t k = 0; k < S; k++) {
      next_checked(l, B, T, win);
      for (int b = 0; b < B; b++) seen[win[b]]++;
    }
    loom_loader_close(l);
  }
  int once = 0, twice = 0;
  for (uint64_t w = 0; w < W; w++) once += seen[w] == 1, twice += seen[w] > 1;
  CHECK(twice == 0 && (uint64_t)once == S * (uint64_t)(B * world),
        "world %d B %d: %d windows seen once (want %llu), %d more than once", world, B, once,
        (unsigned long long)(S * (uint64_t)(B * world)), twice);
  free(seen);
  free(win);
  free(dir);
  loom_rm_rf(DIR "/ranks");
}

static int32_t *batches(loom_loader *l, int steps, int B, int T) {
  int32_t *x = malloc(sizeof(int32_t) * (size_t)(steps * B * T)), *y = malloc(sizeof(int32_t) * (size_t)(B * T));
  for (int s = 0; s < steps; s++) loom_loader_next(l, x + (size_t)s * B * T, y);
  free(y);
  return x;
}

static void test_determinism_and_resume(void) {
  uint64_t sizes[] = {3000, 2001};
  make_shards("det", sizes, 2, 65536);
  char *dir = scratch_path(DIR, "det");
  int B = 3, T = 32, steps = 80; /* W = 156, S = 156 / (3 x 2) = 26: crosses epochs */
  loom_loader *a = open_ok(dir, B, T, 1, 2, 9), *b = open_ok(dir, B, T, 1, 2, 9);
  loom_loader *c = open_ok(dir, B, T, 1, 2, 10);
  if (!a || !b || !c) return;
  int32_t *xa = batches(a, steps, B, T), *xb = batches(b, steps, B, T), *xc = batches(c, steps, B, T);
  size_t bytes = sizeof(int32_t) * (size_t)(steps * B * T);
  CHECK(!memcmp(xa, xb, bytes), "same seed -> same batches");
  CHECK(memcmp(xa, xc, bytes) != 0, "different seed -> different batches");
  /* save after k steps, restore in a fresh loader, continue */
  int cut[] = {0, 10, 25, 26, 60};
  for (int i = 0; i < 5; i++) {
    loom_loader *d = open_ok(dir, B, T, 1, 2, 9), *e = open_ok(dir, B, T, 1, 2, 9);
    free(batches(d, cut[i], B, T));
    loom_loader_state st;
    loom_loader_get_state(d, &st);
    CHECK(loom_loader_set_state(e, &st) == 0, "set_state");
    int32_t *xd = batches(d, steps - cut[i], B, T), *xe = batches(e, steps - cut[i], B, T);
    size_t rest = sizeof(int32_t) * (size_t)((steps - cut[i]) * B * T);
    CHECK(!memcmp(xd, xe, rest) && !memcmp(xd, xa + (size_t)cut[i] * B * T, rest),
          "restored at step %d (epoch %llu index %llu) reproduces the batches", cut[i],
          (unsigned long long)st.epoch, (unsigned long long)st.index);
    free(xd), free(xe);
    loom_loader_close(d), loom_loader_close(e);
  }
  loom_loader_state bad = {0, 26};
  CHECK(loom_loader_set_state(a, &bad) == -1 && contains(loom_errmsg(), "past the 26 batches"),
        "bad state: %s", loom_errmsg());
  free(xa), free(xb), free(xc);
  loom_loader_close(a), loom_loader_close(b), loom_loader_close(c);
  free(dir);
}

static void expect_open_error(const char *spec, int B, int T, int rank, int world, const char *want) {
  loom_loader *l = NULL;
  int rc = loom_loader_open(&l, spec, B, T, rank, world, 1);
  CHECK(rc == -1 && l == NULL && contains(loom_errmsg(), want), "open %s: %s", spec, loom_errmsg());
}

static void test_errors(void) {
  uint64_t sizes[] = {100};
  make_shards("small", sizes, 1, 65536);
  char *dir = scratch_path(DIR, "small"), *empty = scratch_path(DIR, "empty");
  loom_mkdir_p(empty);
  expect_open_error(dir, 4, 16, 0, 2, "100 tokens make 6 windows of T+1 = 17 tokens, but one "
                                      "step needs B x world = 4 x 2 = 8 windows");
  expect_open_error(dir, 1, 16, 2, 2, "rank 2 is not in [0, world size 2)");
  expect_open_error(dir, 0, 16, 0, 1, "must be >= 1");
  expect_open_error(empty, 1, 16, 0, 1, "holds no *.bin token shards");
  expect_open_error(DIR "/nothing*.bin", 1, 16, 0, 1, "no token shard matches");
  char *bad = scratch_path(DIR, "small/zz_bad.bin");
  write_text(bad, "garbage");
  expect_open_error(dir, 1, 16, 0, 1, "zz_bad.bin: too short");
  free(bad), free(dir), free(empty);
}

int main(void) {
  loom_rm_rf(DIR);
  test_basics();
  test_ranks(4, 2, 16, 48);  /* W divisible by B*world */
  test_ranks(3, 2, 8, 50);   /* 2 windows left over per epoch */
  test_ranks(1, 5, 4, 23);
  test_determinism_and_resume();
  test_errors();
  loom_rm_rf(DIR);
  return harness_finish("test_loader");
}
