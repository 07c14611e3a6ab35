/* Fuzz harness: safetensors files (8-byte header length, JSON header, dtypes, shapes,
 * data_offsets) as checkpoints and Hugging Face imports read them. Invariants beyond memory
 * safety: every tensor's bytes lie inside the file, its byte size is numel x dtype size and
 * numel is the product of its shape. Float tensors are converted and summarised. */
#include "fuzz_util.h"
#include "loom/core.h"
#include "loom/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file(data, size, ".safetensors");
  loom_st_file *f;
  if (loom_st_open(&f, path)) return 0;
  for (int i = 0; i < loom_st_count(f); i++) {
    size_t nbytes = loom_st_nbytes(f, i);
    int64_t numel = loom_st_numel(f, i), prod = 1;
    for (int d = 0; d < loom_st_ndim(f, i); d++)
      if (__builtin_mul_overflow(prod, loom_st_shape(f, i)[d], &prod))
        FUZZ_FINDING("tensor '%s': the product of its shape overflows int64", loom_st_name(f, i));
    if (prod != numel || (uint64_t)numel * loom_dtype_size(loom_st_dtype(f, i)) != nbytes)
      FUZZ_FINDING("tensor '%s': numel %lld, shape product %lld, %zu bytes of dtype %s",
                   loom_st_name(f, i), (long long)numel, (long long)prod, nbytes,
                   loom_dtype_name(loom_st_dtype(f, i)));
    if (nbytes > size)
      FUZZ_FINDING("tensor '%s' claims %zu bytes of a %zu-byte file", loom_st_name(f, i), nbytes,
                   size);
    const volatile uint8_t *b = loom_st_data(f, i); /* every byte readable (inside the map) */
    uint8_t sum = 0;
    for (size_t k = 0; k < nbytes; k++) sum ^= b[k];
    (void)sum;
    loom_st_stats st;
    loom_st_tensor_stats(f, i, &st);
    loom_dtype dt = loom_st_dtype(f, i);
    if (dt == LOOM_DT_F32 || dt == LOOM_DT_BF16 || dt == LOOM_DT_F16 || dt == LOOM_DT_F64) {
      float *x = malloc((size_t)numel * sizeof *x + 1);
      if (!x) abort();
      if (loom_st_read_f32(f, loom_st_name(f, i), x, (size_t)numel))
        FUZZ_FINDING("tensor '%s' of a float dtype does not read: %s", loom_st_name(f, i),
                     loom_errmsg());
      free(x);
    }
  }
  for (int i = 0; i < loom_st_metadata_count(f); i++)
    if (!loom_st_metadata(f, loom_st_metadata_key(f, i)))
      FUZZ_FINDING("metadata key %d is listed but not found", i);
  loom_st_close(f);
  return 0;
}
