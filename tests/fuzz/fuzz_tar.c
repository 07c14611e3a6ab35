/* Fuzz harness: tar shards (ustar headers, base-256 sizes, GNU long names, PAX records) as
 * `loom data prepare` and the VQA loader index them. Invariant beyond memory safety: every
 * member the index lists lies inside the file. */
#include "fuzz_util.h"
#include "loom/core.h"
#include "loom/tar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file(data, size, ".tar");
  loom_tar_index ix;
  memset(&ix, 0, sizeof ix);
  if (loom_tar_scan(path, &ix) == 0) {
    for (size_t i = 0; i < ix.n; i++)
      if (ix.members[i].offset > size || ix.members[i].size > size - ix.members[i].offset)
        FUZZ_FINDING("tar member '%s' [%llu, +%llu) lies outside the %zu-byte file",
                     ix.members[i].name, (unsigned long long)ix.members[i].offset,
                     (unsigned long long)ix.members[i].size, size);
    loom_tar_index_free(&ix);
  }
  return 0;
}
