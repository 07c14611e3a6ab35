/* Fuzz harness: an Energon-style prepared directory as the VQA loader reads it:
 * .nv-meta/index.json (loom's sample index: shard sizes, part offsets), dataset.yaml (field
 * map), split.yaml (shards per split) and the shard 000000.tar. Input: the four files in that
 * order separated by the line "\n@@@@\n" (missing parts are empty files). Every sample of
 * the train split is read (skip_bad_samples both off and on). Invariant beyond memory
 * safety: a sample that reads has one image whose bytes lie inside the shard and two turns. */
#include <sys/stat.h>

#include "fuzz_util.h"
#include "loom/core.h"
#include "loom/vqa.h"

static const char SEP[] = "\n@@@@\n";

static void write_part(const char *path, const uint8_t *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f)) abort();
}

static char root[64];

static void remove_root(void) { loom_rm_rf(root); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!root[0]) {
    snprintf(root, sizeof root, "/tmp/loom-fuzz-energon.XXXXXX");
    if (!mkdtemp(root)) abort();
    atexit(remove_root);
    char *meta = loom_sprintf("%s/.nv-meta", root);
    if (mkdir(meta, 0755)) abort();
    free(meta);
  }
  static const char *names[4] = {".nv-meta/index.json", ".nv-meta/dataset.yaml",
                                 ".nv-meta/split.yaml", "000000.tar"};
  const uint8_t *p = data, *end = data + size;
  size_t shard_size = 0;
  for (int k = 0; k < 4; k++) {
    const uint8_t *q = end;
    if (k < 3)
      for (const uint8_t *s = p; s + sizeof SEP - 1 <= end; s++)
        if (!memcmp(s, SEP, sizeof SEP - 1)) {
          q = s;
          break;
        }
    char *path = loom_sprintf("%s/%s", root, names[k]);
    write_part(path, p, (size_t)(q - p));
    free(path);
    if (k == 3) shard_size = (size_t)(q - p);
    p = q < end ? q + sizeof SEP - 1 : end;
  }
  for (int skip = 0; skip < 2; skip++) {
    loom_vqa_dataset *d;
    uint64_t bad = 0;
    if (loom_vqa_dataset_open(&d, root, "train", skip, &bad)) continue;
    for (size_t i = 0; i < loom_vqa_dataset_count(d); i++) {
      loom_vqa_sample s;
      if (loom_vqa_dataset_get(d, i, &s)) continue;
      if (s.n_images != 1 || s.n_turns != 2 || s.image_len[0] > shard_size)
        FUZZ_FINDING("sample %zu: %d images (%zu bytes of a %zu-byte shard), %d turns", i,
                     s.n_images, s.image_len[0], shard_size, s.n_turns);
      loom_vqa_sample_free(&s);
    }
    loom_vqa_dataset_close(d);
  }
  return 0;
}
