/* Data loader over memory-mapped token shards: shard list resolution (file, directory,
 * glob, a shard set's manifest), per-epoch Fisher-Yates window order, rank dealing,
 * resumable state. Semantics are specified in include/loom/loader.h. */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/kernels.h" /* LOOM_IGNORE_INDEX */
#include "loom/loader.h"
#include "loom/shard.h"

struct loom_loader {
  loom_shard *shards;  /* (nshards) */
  uint64_t *start;     /* (nshards) global index of each shard's first token */
  size_t nshards;
  uint64_t total;      /* N tokens (of the part read: see loom_loader_open_part) */
  uint64_t base;       /* global index of the part's first token (0: whole stream) */
  int B, T, rank, world;
  uint64_t seed;
  uint64_t windows;    /* W */
  uint64_t per_epoch;  /* S calls per epoch */
  loom_loader_state st;
  uint64_t *order;     /* (W) window order of epoch order_epoch */
  uint64_t order_epoch;
  int order_valid;
  uint32_t vocab_size;
  int32_t max_token;
  int32_t *window;     /* (T+1) scratch */
  int32_t doc_eod;     /* packed documents: the shards' end-of-document token, else -1 */
};

/* ---- shard list ------------------------------------------------------------------------- */

typedef struct {
  char **v;
  size_t n, cap;
} strlist;

static void strlist_push(strlist *l, const char *s) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 16;
    l->v = loom_realloc(l->v, l->cap, sizeof *l->v);
  }
  l->v[l->n++] = loom_strdup(s);
}

static void strlist_free(strlist *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_dir(const char *dir, strlist *out) {
  DIR *d = opendir(dir);
  if (!d) return loom_err("%s: cannot open the shard directory: %s", dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 4, ".bin") != 0) continue;
    char *p = loom_sprintf("%s/%s", dir, e->d_name);
    strlist_push(out, p);
    free(p);
  }
  closedir(d);
  qsort(out->v, out->n, sizeof *out->v, cmp_str);
  if (out->n == 0)
    return loom_err("%s: the directory holds no *.bin token shards; create them with 'loom "
                    "data tokenize'", dir);
  return 0;
}

/* A manifest (a .json file, or manifest.json of a directory): its shards, in its order;
 * *manifest keeps what it promises for open_shards to check. */
static int from_manifest(const char *path, strlist *out, loom_shard_manifest *manifest) {
  if (loom_shard_manifest_read(path, manifest)) return -1;
  for (size_t i = 0; i < manifest->n; i++) strlist_push(out, manifest->shards[i].path);
  return 0;
}

static int resolve_shards(const char *spec, strlist *out, loom_shard_manifest *manifest,
                          char **manifest_path) {
  char *in_dir = loom_is_dir(spec) ? loom_sprintf("%s/manifest.json", spec) : NULL;
  if (in_dir && loom_path_exists(in_dir)) spec = *manifest_path = in_dir;
  else free(in_dir);
  if (loom_shard_is_manifest(spec)) {
    if (!*manifest_path) *manifest_path = loom_strdup(spec);
    return from_manifest(spec, out, manifest);
  }
  if (loom_is_dir(spec)) return list_dir(spec, out);
  if (loom_path_exists(spec)) {
    strlist_push(out, spec);
    return 0;
  }
  glob_t g;
  int rc = glob(spec, 0, NULL, &g); /* sorted */
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; i++) strlist_push(out, g.gl_pathv[i]);
  globfree(&g);
  if (out->n == 0)
    return loom_err("%s: no token shard matches (not a file, a directory or a glob with "
                    "matches); create shards with 'loom data tokenize'", spec);
  return 0;
}

/* ---- opening -------------------------------------------------------------------------- */

/* manifest: what a manifest promises of each shard (manifest_path NULL: no manifest). */
static int open_shards(loom_loader *l, const strlist *paths, const char *manifest_path,
                       const loom_shard_manifest *manifest) {
  l->shards = loom_calloc(paths->n, sizeof *l->shards);
  l->start = loom_calloc(paths->n, sizeof *l->start);
  for (size_t i = 0; i < paths->n; i++) {
    if (loom_shard_open(&l->shards[i], paths->v[i])) return -1;
    l->nshards++;
    if (manifest_path &&
        loom_shard_manifest_check(manifest_path, paths->v[i], manifest->shards[i].tokens,
                                  &l->shards[i].h, manifest))
      return -1;
    l->start[i] = l->total;
    l->total += l->shards[i].h.count;
    if (l->shards[i].h.vocab_size > l->vocab_size) l->vocab_size = l->shards[i].h.vocab_size;
  }
  return 0;
}

/* Largest token id over the shards; each shard checked its tokens against its header's
 * vocab_size (< 2^31) when it was opened, so every id is a non-negative int32. */
static void scan_max_token(loom_loader *l) {
  l->max_token = -1;
  for (size_t s = 0; s < l->nshards; s++)
    if (l->shards[s].max_token > l->max_token) l->max_token = l->shards[s].max_token;
}

static int check_args(const char *spec, int B, int T, int rank, int world) {
  if (B < 1 || T < 1)
    return loom_err("data loader for '%s': batch size %d and sequence length %d must be >= 1",
                    spec, B, T);
  if (world < 1 || rank < 0 || rank >= world)
    return loom_err("data loader for '%s': rank %d is not in [0, world size %d)", spec, rank,
                    world);
  return 0;
}

static int check_enough(const loom_loader *l, const char *spec) {
  uint64_t need = (uint64_t)l->B * (uint64_t)l->world;
  if (l->windows >= need) return 0;
  return loom_err("data loader for '%s': %llu tokens make %llu windows of T+1 = %d tokens, but "
                  "one step needs B x world = %d x %d = %llu windows; use more data or a "
                  "smaller batch size / sequence length", spec, (unsigned long long)l->total,
                  (unsigned long long)l->windows, l->T + 1, l->B, l->world,
                  (unsigned long long)need);
}

/* part: 0 the whole stream; 1 its head (all but the held-out tail); 2 the held-out tail of
 * floor(N * held_out) tokens. */
static int open_part(loom_loader **out, const char *shards, int B, int T, int rank, int world,
                     uint64_t seed, double held_out, int part) {
  *out = NULL;
  if (check_args(shards, B, T, rank, world)) return -1;
  loom_loader *l = loom_calloc(1, sizeof *l);
  *l = (loom_loader){.B = B, .T = T, .rank = rank, .world = world, .seed = seed, .doc_eod = -1};
  strlist paths = {0};
  loom_shard_manifest manifest = {0};
  char *manifest_path = NULL;
  int rc = resolve_shards(shards, &paths, &manifest, &manifest_path);
  if (rc == 0) rc = open_shards(l, &paths, manifest_path, &manifest);
  strlist_free(&paths);
  loom_shard_manifest_free(&manifest);
  free(manifest_path);
  uint64_t all = l->total;
  if (rc == 0 && part) {
    uint64_t tail = (uint64_t)((double)l->total * held_out);
    if (part == 1) l->total -= tail;
    else l->base = l->total - tail, l->total = tail;
  }
  if (rc == 0) {
    l->windows = l->total > 0 ? (l->total - 1) / (uint64_t)T : 0;
    rc = check_enough(l, shards);
    if (rc && part)
      loom_err_prefix("the %s (data.val_fraction %g of %llu tokens): ",
                      part == 1 ? "training part" : "held-out validation part", held_out,
                      (unsigned long long)all);
  }
  if (rc) {
    loom_loader_close(l);
    return -1;
  }
  l->per_epoch = l->windows / ((uint64_t)B * (uint64_t)world);
  l->order = loom_malloc_for(l->windows * sizeof *l->order, "the order of the token windows");
  l->window = loom_malloc(((size_t)T + 1) * sizeof *l->window);
  scan_max_token(l);
  *out = l;
  return 0;
}

int loom_loader_open(loom_loader **out, const char *shards, int B, int T, int rank, int world,
                     uint64_t seed) {
  return open_part(out, shards, B, T, rank, world, seed, 0, 0);
}

int loom_loader_open_part(loom_loader **out, const char *shards, int B, int T, int rank,
                          int world, uint64_t seed, double held_out, bool validation) {
  if (!(held_out > 0 && held_out < 1))
    return loom_err("data loader for '%s': held-out fraction %g must be in (0, 1)", shards,
                    held_out);
  return open_part(out, shards, B, T, rank, world, seed, held_out, validation ? 2 : 1);
}

void loom_loader_close(loom_loader *l) {
  if (!l) return;
  for (size_t i = 0; i < l->nshards; i++) loom_shard_close(&l->shards[i]);
  free(l->shards);
  free(l->start);
  free(l->order);
  free(l->window);
  free(l);
}

/* ---- batches ---------------------------------------------------------------------------- */

static void make_order(loom_loader *l, uint64_t epoch) {
  if (l->order_valid && l->order_epoch == epoch) return;
  for (uint64_t i = 0; i < l->windows; i++) l->order[i] = i;
  loom_rng rng;
  loom_rng_seed(&rng, l->seed ^ (0x9E3779B97F4A7C15ull * (epoch + 1)));
  for (uint64_t i = l->windows - 1; i > 0; i--) {
    uint64_t j = loom_rng_below(&rng, i + 1);
    uint64_t t = l->order[i];
    l->order[i] = l->order[j];
    l->order[j] = t;
  }
  l->order_epoch = epoch;
  l->order_valid = 1;
}

/* Copy global tokens [start, start + n) into out, crossing shard boundaries. */
static void copy_tokens(const loom_loader *l, uint64_t start, uint64_t n, int32_t *out) {
  start += l->base;
  size_t lo = 0, hi = l->nshards; /* last shard whose start <= start */
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (l->start[mid] <= start) lo = mid; else hi = mid;
  }
  for (size_t s = lo; n > 0; s++) {
    LOOM_ASSERT(s < l->nshards);
    uint64_t off = start - l->start[s], avail = l->shards[s].h.count - off;
    uint64_t k = n < avail ? n : avail;
    loom_shard_copy(&l->shards[s], off, k, out);
    out += k, start += k, n -= k;
  }
}

int loom_loader_next(loom_loader *l, int32_t *inputs, int32_t *targets) {
  make_order(l, l->st.epoch);
  size_t T = (size_t)l->T;
  for (int b = 0; b < l->B; b++) {
    uint64_t pos = (l->st.index * (uint64_t)l->B + (uint64_t)b) * (uint64_t)l->world + (uint64_t)l->rank;
    copy_tokens(l, l->order[pos] * T, T + 1, l->window);
    memcpy(inputs + (size_t)b * T, l->window, T * sizeof *inputs);
    memcpy(targets + (size_t)b * T, l->window + 1, T * sizeof *targets);
  }
  if (l->doc_eod >= 0) /* no target across a document boundary */
    for (size_t i = 0; i < (size_t)l->B * T; i++)
      if (inputs[i] == l->doc_eod) targets[i] = LOOM_IGNORE_INDEX;
  if (++l->st.index == l->per_epoch) {
    l->st.epoch++;
    l->st.index = 0;
  }
  return 0;
}

int loom_loader_pack_documents(loom_loader *l) {
  for (size_t i = 0; i < l->nshards; i++) {
    const loom_shard *s = &l->shards[i];
    if (!s->h.has_eod)
      return loom_err("data.pack_documents: token shard '%s' (version %u) records no "
                      "end-of-document token; re-create it with 'loom data tokenize --eot' "
                      "(every document then ends with <|endoftext|>)", s->path, s->h.version);
    if (s->h.eod_token != l->shards[0].h.eod_token)
      return loom_err("data.pack_documents: token shard '%s' ends documents with token %d but "
                      "'%s' with token %d; tokenize every shard with the same tokenizer",
                      s->path, (int)s->h.eod_token, l->shards[0].path,
                      (int)l->shards[0].h.eod_token);
  }
  l->doc_eod = l->shards[0].h.eod_token;
  return 0;
}

int32_t loom_loader_doc_eod(const loom_loader *l) { return l->doc_eod; }

void loom_loader_get_state(const loom_loader *l, loom_loader_state *s) { *s = l->st; }

int loom_loader_set_state(loom_loader *l, const loom_loader_state *s) {
  if (s->index >= l->per_epoch)
    return loom_err("data loader: saved position %llu is past the %llu batches of an epoch; "
                    "the data, batch size, sequence length or world size changed since it was "
                    "saved", (unsigned long long)s->index, (unsigned long long)l->per_epoch);
  l->st = *s;
  return 0;
}

uint64_t loom_loader_total_tokens(const loom_loader *l) { return l->total; }
uint64_t loom_loader_num_windows(const loom_loader *l) { return l->windows; }
uint64_t loom_loader_batches_per_epoch(const loom_loader *l) { return l->per_epoch; }
uint32_t loom_loader_vocab_size(const loom_loader *l) { return l->vocab_size; }
int32_t loom_loader_max_token(const loom_loader *l) { return l->max_token; }
