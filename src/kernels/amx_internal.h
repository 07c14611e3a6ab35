/* Private to the AMX kernels (gemm_amx.c, flash_tile_amx.c): the one tile configuration they
 * share and the 16 x 16 transpose of 32-bit elements their packs use. Functions carry their
 * own target attributes: the files build on every x86-64 CPU and call them only where
 * loom_kernels_amx(). */
#ifndef LOOM_AMX_INTERNAL_H
#define LOOM_AMX_INTERNAL_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define AMX_FN __attribute__((target("amx-tile,amx-bf16")))
#define AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl")))

/* Eight tiles of 16 rows x 64 bytes (palette 1): fp32 C tiles of 16 x 16, bf16 A tiles of
 * 16 rows x 32 values, B tiles of 16 pair-rows x 16 columns. Loaded by each thread before its
 * first tile instruction (a thread's tiles start unconfigured). */
static inline AMX_FN void amx_tiles_configure(void) {
  struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  /* not _tile_loadconfig: GCC 12's names only the config's first 8 bytes as read, and the
   * stores of the row and column sizes were removed as dead (the CPU then faults) */
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}

static inline AMX_FN void amx_tiles_release(void) { _tile_release(); }

/* rows r[0..15] of 16 uint32 -> r[i][j] = old r[j][i] (unpack 32 and 64, then 128-bit lanes
 * twice) */
static inline AVX512_FN void amx_transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int h = 0; h < 16; h += 8)
    for (int i = 0; i < 4; i++) {
      t[h + i] = _mm512_shuffle_i32x4(u[h + i], u[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_i32x4(u[h + i], u[h + i + 4], 0xdd);
    }
  for (int i = 0; i < 8; i++) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}
#endif
