/* Fuzz harness: LLaVA annotations. Input: one mode byte (even: a .json list, odd: .jsonl
 * lines), then the file. The annotation lies in a private directory that also holds a
 * sub-directory "dir" and a valid 28x28 JPEG "img.jpg", so entries may name an image that
 * exists, one that is a directory, one that is missing. Every entry is read. Inputs holding
 * '/' or '\' are opened but not read (an absolute path or an escape could name any file of
 * the machine, /dev/zero included). Invariant beyond memory safety: a sample that reads has
 * its images' bytes and at least one turn. */
#include <sys/stat.h>

#include "fuzz_util.h"
#include "loom/core.h"
#include "loom/image.h"
#include "loom/vqa.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int jsonl = data[0] & 1;
  const char *path = fuzz_input_file(data + 1, size - 1, jsonl ? ".jsonl" : ".json");
  static int ready;
  if (!ready) { /* the directory's fixtures, once per process */
    char *dir = loom_strdup(path), *img;
    *strrchr(dir, '/') = 0;
    img = loom_sprintf("%s/dir", dir);
    mkdir(img, 0755);
    free(img);
    img = loom_sprintf("%s/img.jpg", dir);
    uint8_t grey[28 * 28 * 3], *jpg;
    size_t n;
    memset(grey, 128, sizeof grey);
    loom_image im = {28, 28, grey};
    if (loom_jpeg_encode(&im, 90, &jpg, &n)) abort();
    FILE *f = fopen(img, "wb");
    if (!f || fwrite(jpg, 1, n, f) != n || fclose(f)) abort();
    free(jpg);
    free(img);
    free(dir);
    ready = 1;
  }
  loom_llava *a;
  if (loom_llava_open(&a, path)) return 0;
  int may_read = !memchr(data + 1, '/', size - 1) && !memchr(data + 1, '\\', size - 1);
  for (size_t i = 0; may_read && i < loom_llava_count(a); i++) {
    loom_vqa_sample s;
    if (loom_llava_get(a, i, &s)) continue;
    if (s.n_turns < 1)
      FUZZ_FINDING("entry %zu read with no turns", i);
    for (int k = 0; k < s.n_images; k++)
      if (!s.images[k])
        FUZZ_FINDING("entry %zu image %d read without bytes", i, k);
    loom_vqa_sample_free(&s);
  }
  loom_llava_close(a);
  return 0;
}
