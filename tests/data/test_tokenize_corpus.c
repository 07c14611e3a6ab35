/* The tokenize pipeline (loom_corpus_tokenize) against the tokenizer itself: whatever the
 * thread count and however small the units of work, the shard holds exactly each document
 * encoded whole (plus the end-of-document token), for plain text (cut at newlines), text
 * without any place to cut, JSON Lines (documents never cut; blank lines and blank texts
 * skipped) and gzip/zstd inputs; shard sets split the same stream at the chosen size and the
 * loader reads them back through the manifest or the directory. */
#include <jansson.h>
#include <zlib.h>
#include <zstd.h>

#include "data_test_util.h"
#include "loom/corpus.h"
#include "loom/loader.h"
#include "loom/shard.h"

#define DIR "tokenize-corpus.tmp"

typedef struct {
  int32_t *v;
  size_t n;
} ids;

static void add(ids *a, const int32_t *x, size_t n) {
  a->v = realloc(a->v, (a->n + n + 1) * sizeof *a->v);
  memcpy(a->v + a->n, x, n * sizeof *x);
  a->n += n;
}

/* The expected stream: each document encoded whole, then eot (when eot >= 0). */
static void expect_doc(loom_tokenizer *t, ids *want, const char *text, size_t len, int32_t eot) {
  int32_t *x;
  size_t n;
  loom_tokenizer_encode(t, text, len, &x, &n);
  add(want, x, n);
  if (eot >= 0) add(want, &eot, 1);
  free(x);
}

static bool shard_is(const char *path, const ids *want, const char *what) {
  loom_shard_header h;
  int32_t *got;
  if (loom_shard_read(path, &h, &got)) {
    CHECK(false, "%s: %s", what, loom_errmsg());
    return false;
  }
  bool same = h.count == want->n && !memcmp(got, want->v, want->n * sizeof *got);
  CHECK(same, "%s: %llu tokens, want %zu", what, (unsigned long long)h.count, want->n);
  free(got);
  return same;
}

static int tokenize(const char *tok, const char *const *in, int n, const char *out, int threads,
                    size_t chunk, bool eot, uint64_t shard_tokens, loom_corpus_result *r) {
  loom_corpus_opts o = {.tokenizer = tok,
                        .inputs = in,
                        .n_inputs = n,
                        .out = out,
                        .threads = threads,
                        .chunk_bytes = chunk,
                        .eot = eot,
                        .shard_tokens = shard_tokens};
  return loom_corpus_tokenize(&o, r);
}

static void test_plain(const char *tok, loom_tokenizer *t, const char *corpus, size_t len) {
  char *a = scratch_path(DIR, "a.txt"), *b = scratch_path(DIR, "b.txt");
  write_text(a, corpus);
  /* no newline at all: never cut, one unit however small the chunk */
  char *flat = loom_strdup(corpus);
  for (char *p = flat; *p; p++)
    if (*p == '\n') *p = ' ';
  write_text(b, flat);
  ids want = {0};
  int32_t eot = loom_tokenizer_token_id(t, "<|endoftext|>");
  expect_doc(t, &want, corpus, len, eot);
  expect_doc(t, &want, flat, len, eot);
  const char *in[] = {a, b};
  const size_t chunks[] = {0, 4096, 777, 64};
  for (int threads = 1; threads <= 3; threads++)
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
      char *out = scratch_path(DIR, "plain.bin");
      loom_corpus_result r;
      int rc = tokenize(tok, in, 2, out, threads, chunks[c], true, 0, &r);
      CHECK(rc == 0, "tokenize: %s", loom_errmsg());
      char what[64];
      snprintf(what, sizeof what, "plain, %d threads, chunk %zu", threads, chunks[c]);
      if (!rc) shard_is(out, &want, what);
      CHECK(rc || (r.p.documents == 2 && r.p.tokens == want.n && r.p.text_bytes == 2 * len),
            "%s: counts", what);
      loom_corpus_result_free(&r);
      free(out);
    }
  free(want.v), free(flat), free(a), free(b);
}

/* JSON Lines of the corpus's paragraphs, with blank lines and a blank text between. */
static void test_jsonl(const char *tok, loom_tokenizer *t, const char *corpus) {
  json_t *para = json_array();
  char *copy = loom_strdup(corpus), *save = NULL;
  for (char *s = strtok_r(copy, "\n", &save); s; s = strtok_r(NULL, "\n", &save))
    json_array_append_new(para, json_string(s));
  free(copy);
  char *path = scratch_path(DIR, "d.jsonl");
  FILE *f = fopen(path, "w");
  ids want = {0};
  int32_t eot = loom_tokenizer_token_id(t, "<|endoftext|>");
  for (size_t i = 0; i < json_array_size(para); i++) {
    const char *s = json_string_value(json_array_get(para, i));
    json_t *o = json_pack("{s:i, s:s}", "id", (int)i, "text", s);
    char *line = json_dumps(o, JSON_COMPACT);
    fprintf(f, "%s\n%s", line, i % 7 == 3 ? "\n   \n{\"text\": \" \"}\n" : "");
    free(line);
    json_decref(o);
    expect_doc(t, &want, s, strlen(s), eot);
  }
  fclose(f);
  const char *in[] = {path};
  for (int threads = 1; threads <= 3; threads += 2)
    for (size_t chunk = 0; chunk <= 300; chunk += 300) {
      char *out = scratch_path(DIR, "jsonl.bin");
      loom_corpus_result r;
      int rc = tokenize(tok, in, 1, out, threads, chunk, false, 0, &r);
      CHECK(rc == 0, "jsonl: %s", loom_errmsg());
      if (!rc) shard_is(out, &want, "jsonl: each line's text encoded whole, then eot");
      CHECK(rc || (r.p.documents == json_array_size(para) && r.p.skipped > 0),
            "jsonl counts: %llu documents, %llu skipped", (unsigned long long)r.p.documents,
            (unsigned long long)r.p.skipped);
      loom_corpus_result_free(&r);
      free(out);
    }
  json_decref(para);
  free(want.v), free(path);
}

static void write_gz(const char *path, const char *text, size_t len) {
  gzFile g = gzopen(path, "wb");
  gzwrite(g, text, (unsigned)len);
  gzclose(g);
}

static void write_zst(const char *path, const char *text, size_t len) {
  size_t cap = ZSTD_compressBound(len);
  char *z = malloc(cap);
  size_t n = ZSTD_compress(z, cap, text, len, 3);
  if (loom_write_file_atomic(path, z, n)) exit(2);
  free(z);
}

static void test_compressed(const char *tok, loom_tokenizer *t, const char *corpus, size_t len) {
  char *gz = scratch_path(DIR, "c.txt.gz"), *zs = scratch_path(DIR, "c.txt.zst");
  write_gz(gz, corpus, len);
  write_zst(zs, corpus, len);
  ids want = {0};
  expect_doc(t, &want, corpus, len, -1);
  const char *in[2][1] = {{gz}, {zs}};
  for (int k = 0; k < 2; k++) {
    char *out = scratch_path(DIR, "z.bin");
    loom_corpus_result r;
    int rc = tokenize(tok, in[k], 1, out, 2, 5000, false, 0, &r);
    CHECK(rc == 0, "%s: %s", in[k][0], loom_errmsg());
    if (!rc) shard_is(out, &want, k ? "zstd input" : "gzip input");
    loom_corpus_result_free(&r);
    free(out);
  }
  /* the whole-file reader agrees */
  char *text;
  size_t n;
  CHECK(loom_corpus_read_text(zs, NULL, "|", &text, &n) == 0 && n == len &&
            !memcmp(text, corpus, len),
        "read_text of a .zst");
  free(text);
  free(want.v), free(gz), free(zs);
}

/* Shards of a chosen size: the same stream as one shard, read back by the loader through the
 * manifest and through the directory. */
static void test_sets(const char *tok, const char *corpus) {
  char *a = scratch_path(DIR, "set.txt");
  write_text(a, corpus);
  const char *in[] = {a, a, a};
  char *one = scratch_path(DIR, "one.bin");
  loom_corpus_result r;
  CHECK(tokenize(tok, in, 3, one, 2, 2000, true, 0, &r) == 0, "one: %s", loom_errmsg());
  uint64_t total = r.p.tokens;
  loom_corpus_result_free(&r);
  loom_mkdir_p(DIR "/set");
  CHECK(tokenize(tok, in, 3, DIR "/set", 2, 2000, true, 10000, &r) == 0, "set: %s", loom_errmsg());
  int shards = r.shards;
  CHECK(shards == (int)((total + 9999) / 10000), "%d shards of 10000 for %llu tokens", shards,
        (unsigned long long)total);
  CHECK(r.manifest && !strcmp(r.manifest, DIR "/set/manifest.json"), "manifest %s", r.manifest);
  loom_corpus_result_free(&r);
  loom_shard_header h;
  CHECK(loom_shard_read_header(DIR "/set/shard_000000.bin", &h) == 0 && h.count == 10000 &&
            h.has_eod,
        "first shard: full, records the end-of-document token");
  const char *specs[] = {DIR "/one.bin", DIR "/set/manifest.json", DIR "/set"};
  int32_t in0[3][64], tg0[3][64];
  for (int k = 0; k < 3; k++) {
    loom_loader *l;
    CHECK(loom_loader_open(&l, specs[k], 2, 32, 0, 1, 5) == 0, "loader %s: %s", specs[k],
          loom_errmsg());
    if (!l) continue;
    CHECK(loom_loader_total_tokens(l) == total, "%s: %llu tokens", specs[k],
          (unsigned long long)loom_loader_total_tokens(l));
    loom_loader_next(l, in0[k], tg0[k]);
    loom_loader_close(l);
  }
  CHECK(!memcmp(in0[0], in0[1], sizeof in0[0]) && !memcmp(in0[0], in0[2], sizeof in0[0]),
        "the same batches through the manifest and the directory");
  /* a shard rewritten after the manifest: the loader says so */
  int32_t few[3] = {1, 2, 3};
  loom_shard_write_docs(DIR "/set/shard_000001.bin", few, 3, h.vocab_size, h.eod_token);
  loom_loader *l;
  CHECK(loom_loader_open(&l, DIR "/set", 1, 8, 0, 1, 5) != 0 &&
            contains(loom_errmsg(), "holds 3 tokens, but the manifest"),
        "a changed shard: %s", loom_errmsg());
  /* a shorter run of the same name removes the earlier run's extra shards */
  CHECK(tokenize(tok, in, 1, DIR "/set/", 1, 0, true, 10000, &r) == 0, "rerun: %s", loom_errmsg());
  CHECK(r.removed_stale == shards - r.shards && !loom_path_exists(DIR "/set/shard_000003.bin"),
        "stale shards removed: %d", r.removed_stale);
  loom_corpus_result_free(&r);
  free(a), free(one);
}

int main(void) {
  loom_rm_rf(DIR);
  char *corpus;
  size_t len;
  loom_synth_text(40000, 11, &corpus, &len);
  char *tok = scratch_path(DIR, "tok.json");
  CHECK(loom_tokenizer_train(corpus, len, 400, tok) == 0, "train: %s", loom_errmsg());
  loom_tokenizer *t;
  if (loom_tokenizer_load(&t, tok) == 0) {
    test_plain(tok, t, corpus, len);
    test_jsonl(tok, t, corpus);
    test_compressed(tok, t, corpus, len);
    test_sets(tok, corpus);
    loom_tokenizer_free(t);
  }
  free(corpus), free(tok);
  loom_rm_rf(DIR);
  return harness_finish("test_tokenize_corpus");
}
