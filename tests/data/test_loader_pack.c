/* Packed documents in the data path: token shards of version 2 record the end-of-document
 * token (header offset 28) and version 1 files stay byte-identical to older loom's; with
 * data.pack_documents the loader gives the same windows in the same order as without, and
 * only the targets whose input is the end-of-document token become LOOM_IGNORE_INDEX; shards
 * without the token, or with different tokens, are refused with the file named; a corrupt
 * token in the header is refused at open. */
#include "data_test_util.h"
#include "loom/kernels.h"
#include "loom/loader.h"
#include "loom/shard.h"

#define DIR "data-loader-pack.tmp"
#define EOD 2

/* documents of 1..9 tokens (values 10..99), each ending with EOD */
static int32_t *make_docs(uint64_t n, uint64_t seed) {
  int32_t *tok = malloc(n * sizeof *tok);
  loom_rng r;
  loom_rng_seed(&r, seed);
  uint64_t left = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (left == 0) left = 1 + loom_rng_below(&r, 9);
    tok[i] = --left == 0 ? EOD : 10 + (int32_t)loom_rng_below(&r, 90);
  }
  return tok;
}

static void test_header(void) {
  int32_t tok[5] = {5, 6, EOD, 7, EOD};
  char *v1 = scratch_path(DIR, "v1.bin"), *v2 = scratch_path(DIR, "v2.bin");
  CHECK(loom_shard_write(v1, tok, 5, 100) == 0, "%s", loom_errmsg());
  CHECK(loom_shard_write_docs(v2, tok, 5, 100, EOD) == 0, "%s", loom_errmsg());
  char *b1, *b2;
  size_t n1, n2;
  CHECK(loom_read_file(v1, &b1, &n1) == 0 && loom_read_file(v2, &b2, &n2) == 0, "read back");
  static const uint8_t zeros[36];
  CHECK(n1 == 74 && b1[8] == 1 && !memcmp(b1 + 28, zeros, 36), "version 1 header as before");
  CHECK(n2 == 74 && b2[8] == 2 && b2[28] == EOD && !memcmp(b2 + 29, zeros, 35) &&
            !memcmp(b1 + 64, b2 + 64, 10) && !memcmp(b1 + 12, b2 + 12, 16),
        "version 2: eod at offset 28, the rest as version 1");
  loom_shard_header h;
  CHECK(loom_shard_read_header(v2, &h) == 0 && h.version == 2 && h.has_eod && h.eod_token == EOD,
        "version 2 read back: %s", loom_errmsg());
  CHECK(loom_shard_read_header(v1, &h) == 0 && h.version == 1 && !h.has_eod, "version 1 read");
  /* an end-of-document token outside the vocabulary: refused when writing and reading */
  CHECK(loom_shard_write_docs(v2, tok, 5, 100, 100) != 0 &&
            contains(loom_errmsg(), "end-of-document token 100 is outside"),
        "writer refuses eod 100: %s", loom_errmsg());
  b2[28] = 100;
  char *bad = scratch_path(DIR, "bad_eod.bin");
  CHECK(loom_write_file_atomic(bad, b2, n2) == 0, "write");
  CHECK(loom_shard_read_header(bad, &h) != 0 && contains(loom_errmsg(), "bad_eod.bin") &&
            contains(loom_errmsg(), "end-of-document token 100 (header offset 28)"),
        "corrupt eod refused: %s", loom_errmsg());
  b2[8] = 3; /* an unknown version names both known ones */
  CHECK(loom_write_file_atomic(bad, b2, n2) == 0, "write");
  CHECK(loom_shard_read_header(bad, &h) != 0 && contains(loom_errmsg(), "versions 1 and 2"),
        "unknown version: %s", loom_errmsg());
  free(b1), free(b2), free(v1), free(v2), free(bad);
}

static void test_targets(void) {
  const uint64_t n1 = 700, n2 = 533;
  int32_t *a = make_docs(n1, 1), *b = make_docs(n2, 2);
  char *d = scratch_path(DIR, "docs"), *p1 = scratch_path(DIR, "docs/a.bin");
  char *p2 = scratch_path(DIR, "docs/b.bin");
  loom_mkdir_p(d);
  CHECK(loom_shard_write_docs(p1, a, n1, 100, EOD) == 0 &&
            loom_shard_write_docs(p2, b, n2, 100, EOD) == 0, "%s", loom_errmsg());
  const int B = 3, T = 32;
  for (int world = 1; world <= 2; world++)
    for (int rank = 0; rank < world; rank++) {
      loom_loader *plain, *packed;
      CHECK(loom_loader_open(&plain, d, B, T, rank, world, 5) == 0 &&
                loom_loader_open(&packed, d, B, T, rank, world, 5) == 0, "%s", loom_errmsg());
      CHECK(loom_loader_doc_eod(packed) == -1, "not packing before asked");
      CHECK(loom_loader_pack_documents(packed) == 0 && loom_loader_doc_eod(packed) == EOD,
            "pack: %s", loom_errmsg());
      int32_t x0[B * T], y0[B * T], x1[B * T], y1[B * T];
      long eods = 0, other = 0, same_inputs = 1;
      uint64_t calls = loom_loader_batches_per_epoch(plain) + 2; /* into the second epoch */
      for (uint64_t c = 0; c < calls; c++) {
        loom_loader_next(plain, x0, y0);
        loom_loader_next(packed, x1, y1);
        same_inputs &= !memcmp(x0, x1, sizeof x0);
        for (int i = 0; i < B * T; i++) {
          if (x1[i] == EOD) eods += y1[i] == LOOM_IGNORE_INDEX;
          else other += y1[i] != y0[i];
          if (x1[i] == EOD && y1[i] != LOOM_IGNORE_INDEX) other++;
        }
      }
      CHECK(same_inputs, "packed windows differ from the plain loader's");
      CHECK(other == 0 && eods > 0, "targets: %ld EOD inputs ignored, %ld other differences",
            eods, other);
      loom_loader_close(plain);
      loom_loader_close(packed);
    }
  /* a version 1 shard in the set: refused, the file named */
  char *p3 = scratch_path(DIR, "docs/c.bin");
  CHECK(loom_shard_write(p3, a, n1, 100) == 0, "%s", loom_errmsg());
  loom_loader *l;
  CHECK(loom_loader_open(&l, d, B, T, 0, 1, 5) == 0, "%s", loom_errmsg());
  CHECK(loom_loader_pack_documents(l) != 0 && contains(loom_errmsg(), "c.bin") &&
            contains(loom_errmsg(), "records no end-of-document token") &&
            contains(loom_errmsg(), "loom data tokenize --eot"),
        "version 1 shard refused: %s", loom_errmsg());
  loom_loader_close(l);
  /* two different end-of-document tokens */
  CHECK(loom_shard_write_docs(p3, a, n1, 100, 9) == 0, "%s", loom_errmsg());
  CHECK(loom_loader_open(&l, d, B, T, 0, 1, 5) == 0, "%s", loom_errmsg());
  CHECK(loom_loader_pack_documents(l) != 0 && contains(loom_errmsg(), "with token 9") &&
            contains(loom_errmsg(), "with token 2"),
        "different eod refused: %s", loom_errmsg());
  loom_loader_close(l);
  free(a), free(b), free(d), free(p1), free(p2), free(p3);
}

int main(void) {
  test_header();
  test_targets();
  loom_rm_rf(DIR);
  return harness_finish("test_loader_pack");
}
