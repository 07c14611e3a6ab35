/* A vision-language dataset behind one interface: a prepared Energon-style directory (one
 * split) or a LLaVA-style annotation file (.json / .jsonl). */
#include <stdlib.h>

#include "loom/core.h"
#include "loom/vqa.h"

void *loom_energon_open(const char *dir, const char *split, bool skip_bad, uint64_t *bad_shards);
size_t loom_energon_count(const void *e);
int loom_energon_get(void *e, size_t i, loom_vqa_sample *s);
void loom_energon_close(void *e);

struct loom_vqa_dataset {
  void *energon;
  loom_llava *llava;
};

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

int loom_vqa_dataset_open(loom_vqa_dataset **out, const char *path, const char *split,
                          bool skip_bad, uint64_t *bad_shards) {
  *out = NULL;
  uint64_t bad = 0;
  loom_vqa_dataset *d = loom_calloc(1, sizeof *d);
  int rc = 0;
  if (!path || !*path) {
    rc = loom_err("no vision-language data given: set data.vqa_path to a prepared directory "
                  "or a LLaVA .json/.jsonl file");
  } else if (loom_is_dir(path)) {
    if (!(d->energon = loom_energon_open(path, split ? split : "train", skip_bad, &bad))) rc = -1;
  } else if (ends_with(path, ".json") || ends_with(path, ".jsonl")) {
    rc = loom_llava_open(&d->llava, path);
  } else {
    rc = loom_err("%s is neither a directory prepared by `loom data prepare` nor a LLaVA "
                  ".json/.jsonl annotation file%s", path,
                  loom_path_exists(path) ? "" : " (it does not exist)");
  }
  if (bad_shards) *bad_shards = bad;
  if (rc) {
    free(d);
    return -1;
  }
  *out = d;
  return 0;
}

size_t loom_vqa_dataset_count(const loom_vqa_dataset *d) {
  return d->energon ? loom_energon_count(d->energon) : loom_llava_count(d->llava);
}

int loom_vqa_dataset_get(loom_vqa_dataset *d, size_t i, loom_vqa_sample *s) {
  return d->energon ? loom_energon_get(d->energon, i, s) : loom_llava_get(d->llava, i, s);
}

void loom_vqa_dataset_close(loom_vqa_dataset *d) {
  if (!d) return;
  loom_energon_close(d->energon);
  loom_llava_close(d->llava);
  free(d);
}
